"""Inside the graph: calling input_fn and model_fn the way ``tf.estimator`` did, and checking what they return."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from toolkit.estimator.spec import EstimatorSpec, SpecError

__all__ = ["call_input_fn", "call_model_fn", "input_fn_result", "metric_ops"]

v1 = tf.compat.v1


def _arg_names(fn: Callable[..., Any]) -> tuple[set[str], bool]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set(), False
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return set(params), var_kw


def _reads_a_dataset_or_queue(result: Any) -> bool:
    """TF's test: a top-level tensor comes from an iterator (a Dataset), or the graph has queue runners."""
    tensors = [t for t in tf.nest.flatten(result) if isinstance(t, tf.Tensor)]
    return any(t.op.type == "IteratorGetNext" for t in tensors) or bool(
        v1.get_collection(v1.GraphKeys.QUEUE_RUNNERS))


def input_fn_result(input_fn: Callable[..., Any], mode: str, *, params: Any, config: Any,
                    input_context: Any = None) -> Any:
    """What ``input_fn`` returns, called with the subset of (mode, params, config, input_context) it names."""
    if not callable(input_fn):
        raise SpecError(f"`input_fn` is {type(input_fn).__name__}; expected a function returning a "
                        "tf.data.Dataset of (features, labels), or a (features, labels) tuple of tensors.",
                        field="input_fn")
    names, var_kw = _arg_names(input_fn)
    offered = {"mode": mode, "params": params, "config": config, "input_context": input_context}
    kwargs = {k: v for k, v in offered.items() if k in names or (var_kw and k != "input_context")}
    if "input_context" in kwargs and input_context is None:
        kwargs["input_context"] = tf.distribute.InputContext()
    return input_fn(**kwargs)


def call_input_fn(input_fn: Callable[..., Any], mode: str, *, params: Any, config: Any,
                  input_context: Any = None) -> tuple[Any, Any]:
    """``(features, labels or None)`` from ``input_fn``'s Dataset, tensors or plain values."""
    result = input_fn_result(input_fn, mode, params=params, config=config, input_context=input_context)
    if isinstance(result, tf.data.Dataset):
        result = v1.data.make_one_shot_iterator(result).get_next()
    elif mode == "infer" and not _reads_a_dataset_or_queue(result):
        # on TF's own logger, in TF's words, as tf.estimator warned (code that watched for it still sees it)
        v1.logging.warning("Input graph does not use tf.data.Dataset or contain a QueueRunner. That means predict "
                           "yields forever. This is probably a mistake. Return a tf.data.Dataset from input_fn so "
                           "that predict() ends with the data.")
    if isinstance(result, (tuple, list)) and len(result) == 2:
        features, labels = result
    elif isinstance(result, (tuple, list)):
        raise SpecError(f"input_fn should return (features, labels) as a len 2 tuple: it returned a "
                        f"{type(result).__name__} of {len(result)} items. Return (features, labels), features "
                        "alone, or a tf.data.Dataset of either.", field="input_fn")
    else:
        features, labels = result, None
    if features is None or isinstance(features, (str, bytes)):
        raise SpecError(f"input_fn returned {type(result).__name__} {result!r}; expected a "
                        "tf.data.Dataset of (features, labels), or a (features, labels) tuple of tensors.",
                        field="input_fn")
    # NumPy arrays, lists and numbers reach model_fn as they are, as in TF: its ops convert them
    return features, labels


def _fresh_keras_names() -> Any:
    """Keras 3 names layers by a process-wide count; each graph counts afresh (as Keras 2 did per graph)."""
    import contextlib
    import sys

    if "keras" not in sys.modules:
        return contextlib.nullcontext()
    from toolkit._compat.keras import fresh_layer_names

    return fresh_layer_names()


def call_model_fn(model_fn: Callable[..., Any], features: Any, labels: Any, mode: str, *, params: Any,
                  config: Any) -> EstimatorSpec:
    """Calls model_fn with the subset of (features, labels, mode, params, config) it names."""
    from toolkit.estimator._construct import model_fn_args

    names = set(model_fn_args(model_fn))
    if "labels" not in names and labels is not None:
        raise SpecError("model_fn does not take labels, but input_fn returns labels. Add `labels` to model_fn's "
                        "arguments, or return features alone from input_fn.", field="input_fn")
    offered = {"labels": labels, "mode": mode, "params": params, "config": config}
    kwargs = {k: v for k, v in offered.items() if k in names}
    with _fresh_keras_names():
        spec = model_fn(features=features, **kwargs)
    if not isinstance(spec, EstimatorSpec):
        raise SpecError(f"model_fn should return an EstimatorSpec: model_fn returned {type(spec).__name__} "
                        f"{spec!r:.80}. Return e.g. EstimatorSpec(mode, loss=loss, train_op=train_op).",
                        field="model_fn")
    return spec


def metric_ops(spec: EstimatorSpec) -> tuple[dict[str, Any], list[Any]]:
    """``({name: value}, [update ops])`` from eval_metric_ops (the spec made each a pair), plus the mean ``loss``."""
    values: dict[str, Any] = {}
    updates: list[Any] = []
    for name, (value, update) in (spec.eval_metric_ops or {}).items():  # __post_init__ made None {}
        if name == "global_step":
            raise SpecError("Metric with name `global_step` is not allowed, because Estimator already defines "
                            "a default metric with the same name. Rename the metric in eval_metric_ops.",
                            field="eval_metric_ops.global_step")
        values[name] = value
        updates.append(update)
    if "loss" not in values:
        loss_value, loss_update = v1.metrics.mean(spec.loss)
        values["loss"] = loss_value
        updates.append(loss_update)
    return values, updates
