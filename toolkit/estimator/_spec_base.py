"""The Estimator contract's pure-Python names every estimator module shares: errors, ``ModeKeys``, the eval-name check.

They live apart from ``spec`` so that the modules ``spec`` calls on (its
TensorFlow checks, exporters, export outputs) import them without importing
``spec`` back.
"""
from __future__ import annotations

from typing import Any

from tf_config.errors import FieldError

__all__ = ["ModeKeys", "SpecError", "SpecTypeError", "check_eval_name", "is_metric_object"]


class SpecError(FieldError):
    """A spec or model_fn result is invalid; ``.field`` names the argument."""


class SpecTypeError(SpecError, TypeError):
    """A spec field of the wrong type (where ``tf.estimator`` raised ``TypeError``)."""


class ModeKeys:
    """The three modes a model_fn is called in (``tf.estimator.ModeKeys``' values)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"
    ALL = (TRAIN, EVAL, PREDICT)


def is_metric_object(value: Any) -> bool:
    """A Keras (tf_keras) metric object: has ``result()`` and ``update_state()``."""
    return callable(getattr(value, "result", None)) and callable(getattr(value, "update_state", None))


def check_eval_name(name: Any, error: Any, owner: str = "evaluation") -> None:
    """Any string, as TF took, that stays one directory below model_dir (``eval_<name>``)."""
    if name is None:
        return
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise error(f"{owner} `name` is {name!r}; expected a non-empty string without '/' (summaries go "
                    "to model_dir/eval_<name>), e.g. 'census-eval'.", field="name")
