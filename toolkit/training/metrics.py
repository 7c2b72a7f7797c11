"""Keras metric objects as sums the engine can add across replicas and workers.

Keras 3 updates a stateful metric with ``assign(state + increment)``. Under
asynchronous parameter servers two workers doing that at once lose one
increment, and under MultiWorkerMirrored each worker only sees its shard. Here
every step *returns* its increments (true positives per threshold, a confusion
matrix, weighted sums) in the engine's stats vector; the engine adds them over
replicas, steps and workers, and the value is computed from the totals, with
Keras' own formulas. So ``AUC`` over two workers equals ``AUC`` over the data.

``engine_metrics`` maps ``compile``'s ``metrics``/``weighted_metrics`` to that
form and refuses, naming the metric, what cannot be added up.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from toolkit._compat import keras as _compat
from toolkit.training.config import TrainingError
from toolkit.training.step import MetricFn, Nest, ResolvedMetric, SummedMetric, resolve_metrics

__all__ = ["engine_metrics", "same_rank", "split_labels", "AUCSums", "ConfusionSums", "MeanIoUSums", "WeightedMean"]

EngineMetric = ResolvedMetric  # a per-example function (y_true, y_pred) or a SummedMetric


def same_rank(y_true: Nest, y_pred: Nest) -> Nest:
    """Labels of shape [batch] against predictions of shape [batch, 1] (or the reverse) get a matching rank.

    Keras' compiled losses and metrics do the same before calling a loss function.
    """
    true_rank, pred_rank = getattr(y_true.shape, "rank", None), getattr(y_pred.shape, "rank", None)
    if true_rank is None or pred_rank is None or true_rank == pred_rank:
        return y_true
    if true_rank == pred_rank - 1 and y_pred.shape[-1] == 1:
        return tf.expand_dims(y_true, -1)
    if true_rank == pred_rank + 1 and y_true.shape[-1] == 1:
        return tf.squeeze(y_true, -1)
    return y_true


def split_labels(labels: Nest) -> tuple[Nest, tf.Tensor | None]:
    """``(y, sample_weight)`` from a batch's labels: a pair when the input carries weights, else ``(y, None)``.

    (Per-output labels are refused at compile time, so a tuple is always such a pair.)
    """
    return (labels[0], labels[1]) if isinstance(labels, tuple) else (labels, None)


def _ones_per_example(y: tf.Tensor) -> tf.Tensor:
    return tf.ones(tf.shape(y)[:1], tf.float32)


def _flat(labels: Nest, predictions: Nest, name: str) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Labels, predictions and per-entry weights flattened alike (Keras' confusion-matrix convention)."""
    y_true, weights = split_labels(labels)
    if weights is None:
        weights = _ones_per_example(y_true)
    y_pred = tf.cast(predictions, tf.float32)
    y_true = tf.cast(y_true, tf.float32)
    if y_true.shape.rank is not None and y_pred.shape.rank is not None and y_true.shape.rank < y_pred.shape.rank:
        if y_pred.shape[-1] not in (1, None):
            raise TrainingError(
                f"`metrics` entry {name!r} needs labels shaped like the predictions; received labels of shape "
                f"{y_true.shape} for predictions of shape {y_pred.shape}. One-hot encode the labels "
                "(keras.utils.to_categorical) or use a per-example metric such as 'accuracy'.", field="metrics")
        y_true = tf.reshape(y_true, tf.shape(y_pred))
    weights = tf.cast(weights, tf.float32)
    weights = tf.reshape(weights, tf.concat([tf.shape(weights), tf.ones([tf.rank(y_pred) - 1], tf.int32)], 0))
    weights = tf.broadcast_to(weights, tf.shape(y_pred))
    return tf.reshape(y_true, [-1]), tf.reshape(y_pred, [-1]), tf.reshape(weights, [-1])


def _above(y_pred: tf.Tensor, thresholds: np.ndarray) -> tf.Tensor:
    return tf.cast(y_pred[tf.newaxis, :] > tf.constant(thresholds, tf.float32)[:, tf.newaxis], tf.float32)


def _no_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros_like(a, dtype=np.float64), where=b != 0)


#: how Keras' AUC turns the curve's values at two neighbouring thresholds into a rectangle's height.
_HEIGHTS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "INTERPOLATION": lambda a, b: (a + b) / 2, "MINORING": np.minimum, "MAJORING": np.maximum}


class AUCSums(SummedMetric):
    """``keras.metrics.AUC``: tp, fp, tn, fn per threshold; the area from Keras' formulas."""

    def __init__(self, metric: keras.metrics.AUC, *, weighted: bool) -> None:
        if metric.multi_label or metric.label_weights is not None:
            raise TrainingError(
                f"`metrics` contains AUC {metric.name!r} with multi_label=True or label_weights, which the "
                "engine cannot aggregate across workers yet. Use AUC() over all labels (multi_label=False).",
                field="metrics")
        self.name, self.weighted = metric.name, weighted
        self.thresholds = np.asarray(metric.thresholds, np.float64)
        self.curve, self.summation = metric.curve.name, metric.summation_method.name
        self.from_logits = _compat.auc_from_logits(metric)
        self.width = 4 * len(self.thresholds)

    def sums(self, y_true: Nest, y_pred: Nest) -> tf.Tensor:
        labels, predictions, weights = _flat(y_true, y_pred, self.name)
        if self.from_logits:
            predictions = tf.sigmoid(predictions)
        if not self.weighted:
            weights = tf.ones_like(weights)
        above = _above(predictions, self.thresholds)
        positive, negative = labels * weights, (1.0 - labels) * weights
        tp, fp = tf.linalg.matvec(above, positive), tf.linalg.matvec(above, negative)
        fn, tn = tf.reduce_sum(positive) - tp, tf.reduce_sum(negative) - fp
        return tf.concat([tp, fp, tn, fn], 0)

    def result(self, totals: np.ndarray) -> float:
        tp, fp, tn, fn = np.split(np.asarray(totals, np.float64), 4)
        if self.curve == "PR" and self.summation == "INTERPOLATION":
            return self._interpolate_pr_auc(tp, fp, fn)
        recall = _no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _no_nan(fp, fp + tn), recall
        else:
            x, y = recall, _no_nan(tp, tp + fp)
        heights = _HEIGHTS[self.summation](y[:-1], y[1:])
        return float(np.sum((x[:-1] - x[1:]) * heights))

    @staticmethod
    def _interpolate_pr_auc(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> float:
        """Davis & Goadrich's interpolation, as ``keras.metrics.AUC.interpolate_pr_auc``."""
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = _no_nan(dtp, np.maximum(dp, 0))
        intercept = tp[1:] - slope * p[1:]
        ratio = np.where((p[:-1] > 0) & (p[1:] > 0), _no_nan(p[:-1], np.maximum(p[1:], 0)), 1.0)
        increments = _no_nan(slope * (dtp + intercept * np.log(ratio)), np.maximum(tp[1:] + fn[1:], 0))
        return float(np.sum(increments))


class ConfusionSums(SummedMetric):
    """``keras.metrics.Precision`` / ``Recall`` at one threshold: tp and fp (or fn)."""

    def __init__(self, metric: keras.metrics.Metric, *, weighted: bool) -> None:
        thresholds = np.atleast_1d(np.asarray(metric.thresholds, np.float64))
        if metric.top_k is not None or metric.class_id is not None or len(thresholds) != 1:
            raise TrainingError(
                f"`metrics` contains {type(metric).__name__} {metric.name!r} with top_k, class_id or several "
                "thresholds, which the engine cannot aggregate across workers yet. Use one threshold "
                f"(e.g. keras.metrics.{type(metric).__name__}(thresholds=0.5)).", field="metrics")
        self.name, self.weighted, self.thresholds = metric.name, weighted, thresholds
        self.precision = isinstance(metric, keras.metrics.Precision)
        self.width = 2

    def sums(self, y_true: Nest, y_pred: Nest) -> tf.Tensor:
        labels, predictions, weights = _flat(y_true, y_pred, self.name)
        if not self.weighted:
            weights = tf.ones_like(weights)
        above = _above(predictions, self.thresholds)[0]
        tp = tf.reduce_sum(above * labels * weights)
        other = above * (1.0 - labels) if self.precision else (1.0 - above) * labels
        return tf.stack([tp, tf.reduce_sum(other * weights)])

    def result(self, totals: np.ndarray) -> float:
        tp, other = float(totals[0]), float(totals[1])
        return tp / (tp + other) if tp + other else 0.0


class MeanIoUSums(SummedMetric):
    """``keras.metrics.MeanIoU``: the confusion matrix; the mean IoU of the classes that occur."""

    def __init__(self, metric: keras.metrics.MeanIoU, *, weighted: bool) -> None:
        self.name, self.weighted, self.num_classes = metric.name, weighted, int(metric.num_classes)
        self.ignore_class, self.axis = metric.ignore_class, metric.axis
        self.sparse_y_true, self.sparse_y_pred = metric.sparse_y_true, metric.sparse_y_pred
        self.width = self.num_classes * self.num_classes

    def sums(self, y_true: Nest, y_pred: Nest) -> tf.Tensor:
        labels, weights = split_labels(y_true)
        if not self.sparse_y_true:
            labels = tf.argmax(labels, axis=self.axis)
        predictions = y_pred if self.sparse_y_pred else tf.argmax(y_pred, axis=self.axis)
        weights = tf.cast(weights, tf.float32) if self.weighted and weights is not None else _ones_per_example(labels)
        weights = tf.reshape(weights, tf.concat([tf.shape(weights), tf.ones([tf.rank(labels) - 1], tf.int32)], 0))
        weights = tf.reshape(tf.broadcast_to(weights, tf.shape(labels)), [-1])
        labels = tf.reshape(tf.cast(labels, tf.int64), [-1])
        predictions = tf.reshape(tf.cast(predictions, tf.int64), [-1])
        if self.ignore_class is not None:
            keep = tf.not_equal(labels, self.ignore_class)
            labels, predictions, weights = labels[keep], predictions[keep], weights[keep]
        matrix = tf.math.confusion_matrix(labels, predictions, self.num_classes, weights=weights, dtype=tf.float32)
        return tf.reshape(matrix, [-1])

    def result(self, totals: np.ndarray) -> float:
        matrix = np.asarray(totals, np.float64).reshape(self.num_classes, self.num_classes)
        true_positives = np.diag(matrix)
        denominator = matrix.sum(axis=0) + matrix.sum(axis=1) - true_positives
        valid = np.count_nonzero(denominator)
        return float(np.sum(_no_nan(true_positives, denominator)) / valid) if valid else 0.0


class WeightedMean(SummedMetric):
    """A per-example metric weighted by the sample weights: ``sum(w * value) / sum(w)``."""

    width = 2

    def __init__(self, name: str, fn: MetricFn) -> None:
        self.name, self.fn = name, fn

    def sums(self, y_true: Nest, y_pred: Nest) -> tf.Tensor:
        labels, weights = split_labels(y_true)
        weights = _ones_per_example(labels) if weights is None else weights
        values = tf.cast(self.fn(same_rank(labels, y_pred), y_pred), tf.float32)
        if values.shape.rank and values.shape.rank > 1:
            values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
        weights = tf.reshape(tf.cast(weights, tf.float32), [-1])
        return tf.stack([tf.reduce_sum(values * weights), tf.reduce_sum(weights)])

    def result(self, totals: np.ndarray) -> float:
        return float(totals[0]) / float(totals[1]) if totals[1] else 0.0


_STATEFUL: dict[type, Callable[..., SummedMetric]] = {
    keras.metrics.AUC: AUCSums, keras.metrics.Precision: ConfusionSums, keras.metrics.Recall: ConfusionSums,
    keras.metrics.MeanIoU: MeanIoUSums, keras.metrics.OneHotMeanIoU: MeanIoUSums,
}


def _unpacked(fn: MetricFn) -> MetricFn:
    """A per-example metric that ignores the sample weights."""

    def metric(labels: Nest, predictions: Nest) -> tf.Tensor:
        y_true = split_labels(labels)[0]
        return fn(same_rank(y_true, predictions), predictions)

    return metric


def _one(metric: object, *, weighted: bool, packed: bool) -> tuple[str, EngineMetric]:
    builder = _STATEFUL.get(type(metric))
    if builder is not None:
        summed = builder(metric, weighted=weighted)
        return summed.name, summed
    if isinstance(metric, keras.metrics.Metric) and not isinstance(metric, keras.metrics.MeanMetricWrapper):
        raise TrainingError(
            f"`metrics` contains {type(metric).__name__} {metric.name!r}, a stateful metric the engine cannot "
            "aggregate across workers (its state is not a sum the workers can add). Supported: per-example "
            "metrics (names, functions, MeanMetricWrapper such as SparseCategoricalAccuracy), AUC, Precision, "
            "Recall, MeanIoU and OneHotMeanIoU. Drop it from compile(), or compute it from model.predict(...) after "
            "training.",
            field="metrics")
    ((name, fn),) = resolve_metrics([metric]).items()
    if isinstance(fn, SummedMetric) and packed:  # its sums() would receive Keras' packed (labels, sample weights)
        raise TrainingError(
            f"`metrics` contains the SummedMetric {name!r}, which toolkit.fit understands but model.fit does "
            "not. Train with toolkit.fit (its model_fn compiles the model with it), or use a Keras metric or a "
            "per-example function here.",
            field="metrics")
    if isinstance(fn, SummedMetric):
        return name, fn
    return (name, WeightedMean(name, fn)) if weighted else (name, _unpacked(fn))


def _listed(metrics: Any, field: str) -> list[object]:  # Any: as compile() received it
    if metrics is None:
        return []
    if isinstance(metrics, dict) or (isinstance(metrics, (list, tuple)) and any(
            isinstance(m, (list, tuple, dict)) for m in metrics)):
        raise TrainingError(
            f"`{field}` is {metrics!r}: per-output metrics (a dict or nested lists) are not supported under "
            "ParameterServerStrategy or MultiWorkerMirroredStrategy yet. Give a model with one output a flat "
            "list, e.g. metrics=['accuracy', keras.metrics.AUC()].", field=field)
    if isinstance(metrics, (str, keras.metrics.Metric)) or callable(metrics):
        return [metrics]
    return list(metrics)


def engine_metrics(metrics: Sequence[object] | None, weighted_metrics: Sequence[object] | None, *,
                   packed: bool = True) -> dict[str, EngineMetric]:
    """``compile``'s metrics as the engine's ``{name: metric}``; weighted ones get a ``weighted_`` prefix on clashes.

    ``packed``: the labels may carry sample weights (Keras' ``model.fit``), which a ``SummedMetric``
    written for ``toolkit.fit`` would not expect; ``toolkit.fit``'s labels never do.
    """
    resolved: dict[str, EngineMetric] = {}
    for metric in _listed(metrics, "metrics"):
        name, value = _one(metric, weighted=False, packed=packed)
        resolved[name] = value
    for metric in _listed(weighted_metrics, "weighted_metrics"):
        name, value = _one(metric, weighted=True, packed=packed)
        resolved[f"weighted_{name}" if name in resolved else name] = value
    if "loss" in resolved:
        raise TrainingError("`metrics` may not contain a metric named 'loss'; the loss is always reported.",
                            field="metrics")
    return resolved
