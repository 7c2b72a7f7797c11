"""A Keras model's compiled losses and metrics, rebuilt in an Estimator graph under Keras' names.

The loss is Keras' total: each output's loss (one loss for all outputs, a list
in output order, or a dict keyed by output name), weighted by ``loss_weights``
and by the examples' sample weights, summed. Metrics are ``tf_keras`` metric
objects (Keras 2's run in TF1 graphs; Keras 3's only eagerly), named as Keras
named them (``accuracy``; ``<output>_<metric>`` when the model has several
outputs), and renamed by ``metric_names_map``. ``accuracy``/``acc`` and
``crossentropy`` pick the binary, categorical or sparse variant from the shapes,
as Keras did.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolkit.estimator._construct import EstimatorError

__all__ = ["CompiledLoss", "CompiledMetrics"]

_SHAPE_DEPENDENT = {
    "accuracy": ("BinaryAccuracy", "SparseCategoricalAccuracy", "CategoricalAccuracy"),
    "acc": ("BinaryAccuracy", "SparseCategoricalAccuracy", "CategoricalAccuracy"),
    "crossentropy": ("BinaryCrossentropy", "SparseCategoricalCrossentropy", "CategoricalCrossentropy"),
    "ce": ("BinaryCrossentropy", "SparseCategoricalCrossentropy", "CategoricalCrossentropy"),
}


def _per_output(value: Any, names: list[str], field: str) -> list[Any]:
    """A compile argument given once, as a list in output order, or as a dict by output name: one per output."""
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise EstimatorError(f"The Keras model's compiled `{field}` has keys {unknown} that are not its outputs "
                                 f"{names}. Key it by output name.", field=field)
        return [value.get(name) for name in names]
    if isinstance(value, (list, tuple)) and len(names) > 1:
        if len(value) != len(names):
            raise EstimatorError(f"The Keras model's compiled `{field}` lists {len(value)} entries for "
                                 f"{len(names)} outputs {names}. Give one per output, or a dict.", field=field)
        return list(value)
    return [value] * len(names)


def _same_rank(target: Any, prediction: Any) -> tuple[Any, Any]:
    """Labels ``(batch,)`` against predictions ``(batch, 1)`` (or the reverse): the trailing 1 squeezed, as Keras'
    loss wrappers did before calling a loss function (``mse(y, p)`` would otherwise broadcast to a
    ``(batch, batch)`` matrix and train every prediction towards the batch mean)."""
    import tensorflow as tf

    target = tf.convert_to_tensor(target)
    prediction = tf.convert_to_tensor(prediction)
    rank_t, rank_p = target.shape.rank, prediction.shape.rank
    if rank_t is None or rank_p is None:
        return target, prediction
    if rank_p - rank_t == 1 and prediction.shape[-1] == 1:
        prediction = tf.squeeze(prediction, [-1])
    elif rank_t - rank_p == 1 and target.shape[-1] == 1:
        target = tf.squeeze(target, [-1])
    return target, prediction


class CompiledLoss:
    """``loss(targets, predictions, sample_weights) -> scalar``, Keras' total loss."""

    def __init__(self, keras: Any, loss: Any, loss_weights: Any, names: list[str]) -> None:
        if loss is None:
            raise EstimatorError("The given keras model has not been compiled yet: its loss is None. Please compile "
                                 "the model with `model.compile(optimizer=..., loss=...)` before calling "
                                 "`model_to_estimator()`.", field="keras_model")
        self._losses = [self._function(keras, one, name) for one, name in zip(_per_output(loss, names, "loss"),
                                                                               names, strict=True)]
        weights = _per_output(loss_weights or None, names, "loss_weights")
        self._weights = [1.0 if w is None else float(w) for w in weights]
        self._loss_class = keras.losses.Loss

    @staticmethod
    def _function(keras: Any, loss: Any, output: str) -> Callable[..., Any] | None:
        if loss is None:
            return None  # an output without a loss does not train (Keras)
        try:
            function = keras.losses.get(loss)
        except (ValueError, TypeError) as exc:
            raise EstimatorError(f"The Keras model's compiled loss {loss!r} for output {output!r} cannot be "
                                 f"translated into an Estimator loss ({exc}). Compile with a Keras loss name or "
                                 "object, or pass custom_objects={name: function}.", field="loss") from exc
        if not callable(function):
            raise EstimatorError(f"The Keras model's compiled loss {loss!r} for output {output!r} is not callable; "
                                 "expected a Keras loss name, object or function(y_true, y_pred).", field="loss")
        return function

    def __call__(self, targets: list[Any], predictions: list[Any], sample_weights: list[Any]) -> Any:
        import tensorflow as tf

        total = []
        for function, weight, target, prediction, sample in zip(self._losses, self._weights, targets, predictions,
                                                                sample_weights, strict=True):
            if function is None:
                continue
            if isinstance(function, self._loss_class) and not tf.distribute.has_strategy():
                value = function(target, prediction, sample_weight=sample)  # reduces itself
            else:  # a function; or, under a strategy (where Keras refuses to reduce), the per-example loss
                if not isinstance(function, self._loss_class):  # Keras' LossFunctionWrapper aligns the ranks
                    target, prediction = _same_rank(target, prediction)
                per_example = tf.convert_to_tensor(function.call(target, prediction) if isinstance(
                    function, self._loss_class) else function(target, prediction))
                if sample is not None:
                    per_example = per_example * tf.reshape(tf.cast(sample, per_example.dtype),
                                                           [-1] + [1] * (per_example.shape.rank - 1))
                value = tf.reduce_mean(per_example)
            total.append(weight * tf.cast(value, tf.float32))
        return tf.add_n(total)


class CompiledMetrics:
    """The compiled metrics, by their Keras names, as tf_keras metric objects updated in the graph."""

    def __init__(self, metrics: Any, names: list[str], metric_names_map: Mapping[str, str] | None) -> None:
        self._names = names
        per_output = _per_output(metrics, names, "metrics") if metrics else [None] * len(names)
        self._specs: list[tuple[str, int, Any]] = []
        for index, given in enumerate(per_output):
            for spec in given if isinstance(given, (list, tuple)) else ([] if given is None else [given]):
                base = spec if isinstance(spec, str) else getattr(spec, "name", None) or type(spec).__name__
                key = base if len(names) == 1 else f"{names[index]}_{base}"
                self._specs.append((key, index, spec))
        self._renamed = self._check_map(metric_names_map)

    def _check_map(self, metric_names_map: Mapping[str, str] | None) -> dict[str, str]:
        keys = [key for key, _, _ in self._specs]
        if not metric_names_map:
            return {key: key for key in keys}
        unknown = sorted(set(keys) - set(metric_names_map))
        if unknown:
            raise EstimatorError(f"Invalid `metric_names_map`. The following keras model metric names:{unknown} do "
                                 f"not exist in the `metric_names_map` dictionary (it has {sorted(metric_names_map)})."
                                 " Map every compiled metric name to its Estimator name.", field="metric_names_map")
        extra = sorted(set(metric_names_map) - set(keys))
        if extra:
            raise EstimatorError(f"Invalid `metric_names_map`. There are unexpected keys in the `metric_names_map` "
                                 f"dictionary. Expected keys: {keys}, Received: {extra}. Remove them.",
                                 field="metric_names_map")
        return {key: metric_names_map[key] for key in keys}

    @staticmethod
    def _object(tf_keras: Any, spec: Any, target: Any, prediction: Any) -> Any:
        metrics = tf_keras.metrics
        if isinstance(spec, str) and spec.lower() in _SHAPE_DEPENDENT:
            binary, sparse, categorical = _SHAPE_DEPENDENT[spec.lower()]
            last = prediction.shape[-1] if prediction.shape.rank else 1
            rank_t = target.shape.rank if target.shape.rank is not None else prediction.shape.rank
            if last == 1:
                chosen = binary
            elif rank_t is not None and (rank_t < prediction.shape.rank or target.shape[-1] == 1):
                chosen = sparse
            else:
                chosen = categorical
            return getattr(metrics, chosen)(name=spec)
        if isinstance(spec, str):
            found = metrics.get(spec)
            if isinstance(found, str):  # 'auc', 'precision': a class named differently in case
                classes = {n.lower(): getattr(metrics, n) for n in dir(metrics) if isinstance(getattr(metrics, n),
                                                                                             type)}
                if found.lower() not in classes:
                    raise EstimatorError(f"The Keras model's compiled metric {spec!r} is not a Keras metric name.",
                                         field="metrics")
                return classes[found.lower()](name=spec)
            if isinstance(found, type):
                return found(name=spec)
            if isinstance(found, metrics.Metric):
                return found
            return metrics.MeanMetricWrapper(found, name=spec)
        cls = getattr(metrics, type(spec).__name__, None)
        if cls is None or not hasattr(spec, "get_config"):
            label = f"{type(spec).__name__} {getattr(spec, 'name', '')!r}"
            raise EstimatorError(f"The Keras model's compiled metric {label} has no tf_keras counterpart to run "
                                 "in a TF1 graph. Compile without it and add it with "
                                 "toolkit.estimator.add_metrics(estimator, metric_fn).", field="metrics")
        return cls.from_config(spec.get_config())

    def eval_metric_ops(self, targets: list[Any], predictions: list[Any], sample_weights: list[Any]) -> dict[str, Any]:
        import tf_keras

        ops = {}
        for key, index, spec in self._specs:
            metric = self._object(tf_keras, spec, targets[index], predictions[index])
            metric.update_state(targets[index], predictions[index], sample_weight=sample_weights[index])
            ops[self._renamed[key]] = metric
        return ops
