"""What ``tf.estimator.Estimator``'s constructor checked, with its exception types and key phrases.

TF refused a subclass that overrides Estimator's members, a ``model_fn``
without ``features`` or with arguments it does not know, ``params`` that
model_fn does not take, a ``config`` that is not a ``RunConfig`` and a
``model_dir`` that contradicts ``config.model_dir``; and it took a temporary
model_dir when none was given.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import tempfile
from collections.abc import Callable
from typing import Any

from tf_config.errors import FieldError

__all__ = ["EstimatorError", "EstimatorTypeError", "check_not_overridden", "model_fn_args", "resolve_config",
           "verify_model_fn_args"]

logger = logging.getLogger(__name__)

VALID_MODEL_FN_ARGS = frozenset(("features", "labels", "mode", "params", "self", "config"))
#: members a subclass may override, as tf.estimator allowed
_ALLOWED_OVERRIDES = frozenset(("model_fn", "_create_and_assert_global_step", "_export_all_saved_models",
                                "_tf_api_names", "_tf_api_names_v1", "_estimator_api_names",
                                "_estimator_api_names_v1", "_estimator_api_constants",
                                "_validate_features_in_predict_input", "_add_meta_graph_for_mode"))


class EstimatorError(FieldError):
    """A bad Estimator argument or state; ``.field`` names the argument."""


class EstimatorTypeError(EstimatorError, TypeError):
    """An Estimator argument of the wrong type (where ``tf.estimator`` raised ``TypeError``)."""


def model_fn_args(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The argument names of ``fn`` (a function, a bound method, a partial, or a callable object)."""
    target = fn
    if not inspect.isfunction(fn) and not inspect.ismethod(fn) and callable(fn) \
            and not hasattr(fn, "func"):
        target = type(fn).__call__.__get__(fn)
    bound: set[str] = set()
    if isinstance(fn, functools.partial):  # TF left out what the partial already binds
        target, bound = fn.func, set(fn.keywords)
        skip = len(fn.args)
    else:
        skip = 0
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return ()
    names = [name for name, p in params.items()
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    return tuple(name for name in names[skip:] if name not in bound)


def verify_model_fn_args(model_fn: Any, params: Any) -> None:
    if model_fn is None or not callable(model_fn):
        raise EstimatorError(f"model_fn must be provided to Estimator: `model_fn` is {model_fn!r}; pass a "
                             "function model_fn(features, labels, mode, params, config) returning an "
                             "EstimatorSpec.", field="model_fn")
    args = set(model_fn_args(model_fn))
    if "features" not in args:
        raise EstimatorError(f"model_fn ({model_fn!r:.80}) must include features argument: its arguments are "
                             f"{sorted(args)}. Name the first one `features`.", field="model_fn")
    if params is not None and "params" not in args:
        raise EstimatorError(f"model_fn ({model_fn!r:.80}) does not include params argument, but params "
                             f"({params!r:.80}) is passed to Estimator. Add `params` to model_fn's arguments "
                             "or drop params=.", field="params")
    if params is None and "params" in args:
        logger.warning("Estimator's model_fn (%r) includes params argument, but params are not passed to "
                       "Estimator.", model_fn)
    unknown = sorted(args - VALID_MODEL_FN_ARGS)
    if unknown:
        raise EstimatorError(f"model_fn ({model_fn!r:.80}) has following not expected args: {unknown}. A "
                             "model_fn takes features, labels, mode, params and config; bind the others with "
                             "a lambda or functools.partial.", field="model_fn")


def check_not_overridden(base: type, obj: Any) -> None:
    """TF refused subclasses that override Estimator's public API (the project's own classes may)."""
    cls = type(obj)
    if cls.__name__ == "TPUEstimator" or cls.__module__.startswith("toolkit."):
        return
    members = {m for m in dir(base) if not m.startswith("__")}
    own = set()
    for klass in cls.__mro__:
        if klass is base or issubclass(base, klass):
            break
        own |= set(vars(klass))
    overridden = sorted(m for m in (members & own) - _ALLOWED_OVERRIDES
                        if getattr(base, m) is not getattr(cls, m))
    if overridden:
        raise EstimatorError(f"Subclasses of Estimator cannot override members of Estimator. {cls} does "
                             f"override {overridden}. Give the new behaviour another name, or wrap the "
                             "Estimator instead of subclassing it.", field="model_fn")


def resolve_config(config: Any, model_dir: Any, run_config_cls: Any) -> Any:
    """``config`` with model_dir applied (a temporary directory when neither names one), as TF resolved it."""
    if config is None:
        config = run_config_cls()
    config_: Any = config
    if not isinstance(config_, run_config_cls):
        raise EstimatorError(f"config must be an instance of `RunConfig`, but provided {config_!r}. Pass "
                             "toolkit.estimator.RunConfig(...) or None.", field="config")
    model_dir = os.fspath(model_dir) if model_dir is not None else None
    if model_dir and config_.model_dir is not None and config_.model_dir != model_dir:
        raise EstimatorError(f"`model_dir` are set both in constructor and `RunConfig`, but with different "
                             f"values. In constructor: '{model_dir}', in `RunConfig`: '{config_.model_dir}'. "
                             "Pass one of them, or the same path to both.", field="model_dir")
    if model_dir:
        if config_.model_dir != model_dir:
            config_ = config_.replace(model_dir=model_dir)
    elif config_.model_dir is None:
        if not config_.is_local:  # each task would get its own directory: the evaluator would wait forever
            from toolkit.estimator.run_config import RunConfigError

            raise RunConfigError("RunConfig `model_dir` is None but TF_CONFIG describes a cluster; every task "
                                 "must share one directory (the chief writes checkpoints there, the evaluator "
                                 "reads them). Pass model_dir='runs/my-job'.", field="model_dir")
        model_dir = tempfile.mkdtemp()
        logger.warning("Using temporary folder as model directory: %s", model_dir)
        config_ = config_.replace(model_dir=model_dir)
    return config_
