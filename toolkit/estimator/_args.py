"""The Estimator methods' argument checks (TF's exception types and key phrases) and its restore error."""
from __future__ import annotations

import math
import numbers
from typing import Any

import tensorflow as tf

from toolkit.estimator._construct import EstimatorError, EstimatorTypeError

__all__ = ["check_hooks", "check_listeners", "check_positive", "receiver", "restore_error"]

v1 = tf.compat.v1


def check_positive(field: str, value: Any) -> int | None:
    """A step count as an int. A number that is not whole counts as the next whole one, as TF's stop hooks
    did (``steps=200 / 16`` ran 13 steps: they stopped once the count reached the value)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise EstimatorTypeError(f"`{field}` is {type(value).__name__} {value!r}; expected an integer > 0, "
                                 f"e.g. {field}=100.", field=field)
    count = float(value)
    if not count > 0 or not math.isfinite(count):
        raise EstimatorError(f"Must specify {field} > 0, given: {value}. Pass a positive count, e.g. "
                             f"{field}=100, or None.", field=field)
    return int(value) if isinstance(value, numbers.Integral) else math.ceil(count)


def check_hooks(field: str, hooks: Any) -> list[Any]:
    hooks = list(hooks or [])
    for hook in hooks:
        if not isinstance(hook, v1.train.SessionRunHook):
            raise EstimatorTypeError(f"Hooks must be a SessionRunHook, given: {hook!r}. `{field}` should list "
                                     "tf.compat.v1.train.SessionRunHook instances.", field=field)
    return hooks


def check_listeners(listeners: Any) -> list[Any]:
    listeners = list(listeners or [])
    for listener in listeners:
        if not isinstance(listener, v1.train.CheckpointSaverListener):
            raise EstimatorTypeError(f"saving_listeners must be a list of CheckpointSaverListener, given: "
                                     f"{listener!r}. Subclass tf.compat.v1.train.CheckpointSaverListener.",
                                     field="saving_listeners")
    return listeners


def restore_error(path: str, exc: Exception) -> EstimatorError:
    first = str(exc).splitlines()[0]
    return EstimatorError(f"checkpoint {path} does not match the graph model_fn builds ({first}). "
                          "It was written by another model: point model_dir (or checkpoint_path) at this "
                          "model's checkpoints, or use a fresh model_dir.", field="checkpoint_path")


def receiver(serving_input_receiver_fn: Any) -> Any:
    from toolkit.estimator.export import ServingInputReceiver

    if not callable(serving_input_receiver_fn):
        raise EstimatorError(f"`serving_input_receiver_fn` is "
                             f"{serving_input_receiver_fn!r}; expected a function returning a ServingInputReceiver, "
                             "e.g. build_parsing_serving_input_receiver_fn(feature_spec).",
                             field="serving_input_receiver_fn")
    made = serving_input_receiver_fn()
    if not isinstance(made, ServingInputReceiver):
        raise EstimatorError(f"serving_input_receiver_fn returned "
                             f"{type(made).__name__}; expected a ServingInputReceiver(features, receiver_tensors).",
                             field="serving_input_receiver_fn")
    return made
