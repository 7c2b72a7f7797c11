"""``BinaryClassHead`` and ``MultiClassHead``: TF 2's classification heads.

=================  ===================================  ===================================================
head               loss (per example)                   metrics (besides ``loss``), keys end in ``/name``
=================  ===================================  ===================================================
BinaryClassHead    sigmoid cross-entropy, labels in     average_loss, accuracy, precision, recall, auc,
                   [0, 1] (floats allowed) or two       auc_precision_recall, label/mean, prediction/mean,
                   strings with ``label_vocabulary``    accuracy_baseline; with ``thresholds``:
                                                        accuracy/precision/recall ``/positive_threshold_t``
MultiClassHead     sparse softmax cross-entropy,        average_loss, accuracy
                   integer ids or vocabulary strings
=================  ===================================  ===================================================

Predictions: ``logits``, ``probabilities``, ``class_ids``, ``classes``,
``all_class_ids``, ``all_classes`` (binary: also ``logistic``). Export
outputs: ``serving_default`` / ``classification`` (ClassificationOutput),
``predict`` (every prediction), binary: ``regression`` (the logistic).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.head import _checks
from toolkit.estimator.head._checks import SUM_OVER_BATCH_SIZE, HeadError
from toolkit.estimator.head.base import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    SingleHead,
    keras_metrics,
)

__all__ = ["BinaryClassHead", "MultiClassHead"]

v1 = tf.compat.v1
LOGITS, LOGISTIC, PROBABILITIES = "logits", "logistic", "probabilities"
CLASS_IDS, CLASSES, ALL_CLASS_IDS, ALL_CLASSES = "class_ids", "classes", "all_class_ids", "all_classes"


def check_prediction_keys(keys: Sequence[str], valid: Sequence[str]) -> None:
    for key in keys:
        if key not in valid:
            raise HeadError(f"Prediction key must be in PredictionKeys, given: {key}. Valid prediction keys "
                            f"include {list(valid)}.", field="keys")


def broadcast_update(metric: Any, values: tf.Tensor, weights: Any) -> None:
    """``metric.update_state`` with the weights broadcast to the values (TF's rule for mean metrics)."""
    values = tf.cast(values, tf.float32)
    if isinstance(weights, tf.Tensor):
        weights = tf.broadcast_to(weights, tf.shape(values))
    metric.update_state(values, sample_weight=weights)


class _ClassificationHead(SingleHead):
    """What both heads share: argument checks, the vocabulary tables, class predictions."""

    _valid_keys: tuple[str, ...] = ()

    def __init__(self, n_classes: int, *, weight_column: Any, label_vocabulary: Sequence[str] | None,
                 loss_reduction: str, loss_fn: Callable[..., Any] | None, name: str | None) -> None:
        if label_vocabulary is not None and not isinstance(label_vocabulary, (list, tuple)):
            raise HeadError(f"label_vocabulary should be a list or a tuple. Given type: {type(label_vocabulary)}. "
                            "Pass the class names as a list of strings.", field="label_vocabulary")
        super().__init__(weight_column=weight_column, loss_reduction=loss_reduction, loss_fn=loss_fn, name=name)
        self._n_classes = n_classes
        self._label_vocabulary = label_vocabulary
        self._tables: dict[str, Any] = {}

    def _table(self, kind: str) -> Any:
        """A vocabulary lookup table: built in each graph (an Estimator builds several), once when eager."""
        if kind in self._tables and tf.executing_eagerly():
            return self._tables[kind]
        vocab = list(self._label_vocabulary or ())
        ids = list(range(len(vocab)))
        if kind == "ids":
            init = v1.lookup.KeyValueTensorInitializer(vocab, ids, tf.string, tf.int64)
            table = v1.lookup.StaticHashTable(init, default_value=-1, name="class_id_lookup")
        else:
            init = v1.lookup.KeyValueTensorInitializer(ids, vocab, tf.int64, tf.string)
            table = v1.lookup.StaticHashTable(init, default_value="UNK", name="class_string_lookup")
        self._tables[kind] = table
        return table

    def _class_predictions(self, logits: tf.Tensor, class_logits: tf.Tensor, keys: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if PROBABILITIES in keys:
            out[PROBABILITIES] = tf.nn.softmax(class_logits, name=PROBABILITIES)
        if CLASS_IDS in keys or CLASSES in keys:
            class_ids = tf.expand_dims(tf.argmax(class_logits, axis=-1, name=CLASS_IDS), -1)
            if CLASS_IDS in keys:
                out[CLASS_IDS] = class_ids
            if CLASSES in keys:
                out[CLASSES] = (self._table("strings").lookup(class_ids) if self._label_vocabulary
                                else tf.strings.as_string(class_ids, name="str_classes"))
        if ALL_CLASS_IDS in keys:
            out[ALL_CLASS_IDS] = tf.tile(tf.expand_dims(tf.range(self._n_classes), 0), [tf.shape(logits)[0], 1])
        if ALL_CLASSES in keys:
            out[ALL_CLASSES] = self._all_class_names(logits)
        return out

    def _all_class_names(self, logits: tf.Tensor) -> tf.Tensor:
        """Every class name (the vocabulary, or the ids as strings), once per row of ``logits``."""
        names = (tf.constant(list(self._label_vocabulary)) if self._label_vocabulary
                 else tf.strings.as_string(tf.range(self._n_classes)))
        return tf.tile(tf.expand_dims(names, 0), [tf.shape(logits)[0], 1])

    def _keys(self, keys: Sequence[str] | None) -> Sequence[str]:
        if keys:
            check_prediction_keys(keys, self._valid_keys)
            return keys
        return self._valid_keys

    def _label_ids(self, logits: tf.Tensor, labels: Any) -> tf.Tensor:
        raise NotImplementedError

    def _unweighted_loss(self, logits: tf.Tensor, label_ids: tf.Tensor, features: Any) -> tf.Tensor:
        raise NotImplementedError

    def _loss_and_weights(self, logits: Any, labels: Any, features: Any) -> tuple[tf.Tensor, tf.Tensor, Any, Any]:
        logits = _checks.check_logits(logits, self.logits_dimension)
        label_ids = self._label_ids(logits, labels)
        if self._loss_fn:
            unweighted = _checks.call_loss_fn(self._loss_fn, label_ids, logits, features, 1)
        else:
            unweighted = self._unweighted_loss(logits, label_ids, features)
        weights = _checks.weights_of(features, self._weight_column, logits)
        return logits, label_ids, unweighted, weights

    def _classification_output(self, predictions: Mapping[str, tf.Tensor]) -> Any:
        from toolkit.estimator.export import ClassificationOutput
        return ClassificationOutput(scores=predictions[PROBABILITIES], classes=predictions[ALL_CLASSES])


class BinaryClassHead(_ClassificationHead):
    """Binary classification: one logit per example, sigmoid cross-entropy (``tf.estimator.BinaryClassHead``).

    Args:
        weight_column: a feature key or ``tf.feature_column.numeric_column`` weighting each example.
        thresholds: floats in (0, 1); adds accuracy, precision and recall at each threshold.
        label_vocabulary: two class strings, when the labels are strings.
        loss_reduction: ``tf.losses.Reduction`` other than NONE (default SUM_OVER_BATCH_SIZE).
        loss_fn: ``loss_fn(labels, logits[, features])`` returning the per-example loss.
        name: suffix of the metric and summary keys, and the name scope.
    """

    _valid_keys = (LOGITS, LOGISTIC, PROBABILITIES, CLASS_IDS, CLASSES, ALL_CLASS_IDS, ALL_CLASSES)

    def __init__(self, weight_column: Any = None, thresholds: Sequence[float] | None = None,
                 label_vocabulary: Sequence[str] | None = None, loss_reduction: str = SUM_OVER_BATCH_SIZE,
                 loss_fn: Callable[..., Any] | None = None, name: str | None = None) -> None:
        thresholds = tuple(thresholds) if thresholds else ()
        for threshold in thresholds:
            if not 0.0 < threshold < 1.0:
                raise HeadError(f"thresholds not in (0, 1): {thresholds}. Each threshold must lie strictly between "
                                "0 and 1; fix `thresholds`.", field="thresholds")
        super().__init__(2, weight_column=weight_column, label_vocabulary=label_vocabulary,
                         loss_reduction=loss_reduction, loss_fn=loss_fn, name=name)
        self._thresholds = thresholds

    @property
    def logits_dimension(self) -> int:
        return 1

    def _label_ids(self, logits: tf.Tensor, labels: Any) -> tf.Tensor:
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is not None:
            labels = self._table("ids").lookup(labels)
        labels = tf.cast(labels, tf.float32)
        return _checks.check_label_range(labels, 2)

    def _unweighted_loss(self, logits: tf.Tensor, label_ids: tf.Tensor, features: Any) -> tf.Tensor:
        if logits.shape.is_fully_defined() and label_ids.shape.is_fully_defined() and logits.shape != label_ids.shape:
            raise HeadError(f"logits and labels must have the same shape: logits {tuple(logits.shape)}, labels "
                            f"{tuple(label_ids.shape)}. Return one label per row of logits.", field="labels")
        return v1.nn.sigmoid_cross_entropy_with_logits(labels=label_ids, logits=logits)

    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        keys = self._keys(keys)
        logits = _checks.check_logits(logits, 1)
        with v1.name_scope("predictions"):
            out: dict[str, Any] = {}
            if LOGITS in keys:
                out[LOGITS] = logits
            if LOGISTIC in keys:
                out[LOGISTIC] = tf.sigmoid(logits, name=LOGISTIC)
            two_class = tf.concat([tf.zeros_like(logits), logits], axis=-1, name="two_class_logits")
            out.update(self._class_predictions(logits, two_class, keys))
            return out

    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        km, key = keras_metrics(), self._summary_key
        with v1.name_scope("metrics"):
            metrics = {key("average_loss"): km.Mean(name="average_loss"),
                       key("accuracy"): km.Accuracy(name="accuracy"),
                       key("precision"): km.Precision(name="precision"),
                       key("recall"): km.Recall(name="recall"),
                       key("prediction/mean"): km.Mean(name="prediction/mean"),
                       key("label/mean"): km.Mean(name="label/mean"),
                       key("accuracy_baseline"): AccuracyBaseline(name="accuracy_baseline"),
                       key("auc"): km.AUC(name="auc"),
                       key("auc_precision_recall"): km.AUC(curve="PR", name="auc_precision_recall")}
            if regularization_losses is not None:
                metrics[key("regularization_loss")] = km.Mean(name="regularization_loss")
            metrics.update(self._threshold_metrics(self._thresholds))
        return metrics

    def update_metrics(self, eval_metrics: dict[str, Any], features: Any, logits: Any, labels: Any,
                       mode: Any = None, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        key = self._summary_key
        predictions = self.predictions(logits)
        class_ids, logistic = predictions[CLASS_IDS], predictions[LOGISTIC]
        _, labels, unweighted, weights = self._loss_and_weights(logits, labels, features)
        w = weights if isinstance(weights, tf.Tensor) else None
        eval_metrics[key("average_loss")].update_state(unweighted, sample_weight=w)
        for name in ("accuracy", "precision", "recall"):
            eval_metrics[key(name)].update_state(labels, class_ids, sample_weight=w)
        broadcast_update(eval_metrics[key("prediction/mean")], logistic, w)
        broadcast_update(eval_metrics[key("label/mean")], labels, w)
        broadcast_update(eval_metrics[key("accuracy_baseline")], labels, w)
        broadcast_w = tf.broadcast_to(w, tf.shape(logistic)) if w is not None else None
        for name in ("auc", "auc_precision_recall"):
            eval_metrics[key(name)].update_state(labels, logistic, sample_weight=broadcast_w)
        self._regularization_metric(eval_metrics, regularization_losses)
        for t in self._thresholds:
            for metric_key in self._threshold_keys(t):
                eval_metrics[metric_key].update_state(labels, logistic, sample_weight=w)
        return eval_metrics

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        from toolkit.estimator.export import PredictOutput, RegressionOutput
        classification = self._classification_output(predictions)
        return {DEFAULT_SERVING_KEY: classification, CLASSIFY_SERVING_KEY: classification,
                REGRESS_SERVING_KEY: RegressionOutput(value=predictions[LOGISTIC]),
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}


class MultiClassHead(_ClassificationHead):
    """``n_classes`` > 2 logits, sparse softmax cross-entropy (``tf.estimator.MultiClassHead``).

    Args:
        n_classes: the number of classes, more than 2.
        weight_column, label_vocabulary, loss_reduction, loss_fn, name: as ``BinaryClassHead``'s
            (``label_vocabulary`` lists ``n_classes`` strings).
    """

    _valid_keys = (LOGITS, PROBABILITIES, CLASS_IDS, CLASSES, ALL_CLASS_IDS, ALL_CLASSES)

    def __init__(self, n_classes: int, weight_column: Any = None, label_vocabulary: Sequence[str] | None = None,
                 loss_reduction: str = SUM_OVER_BATCH_SIZE, loss_fn: Callable[..., Any] | None = None,
                 name: str | None = None) -> None:
        if n_classes is None:
            raise HeadError("n_classes cannot be None. Pass the number of classes (more than 2).", field="n_classes")
        if isinstance(n_classes, int) and n_classes <= 2:
            raise HeadError(f"n_classes must be > 2: {n_classes}. For two classes use BinaryClassHead.",
                            field="n_classes")
        if label_vocabulary is not None and isinstance(label_vocabulary, (list, tuple)) \
                and len(label_vocabulary) != n_classes:
            raise HeadError(f'"label_vocabulary" does not have "n_classes" items. len(label_vocabulary)='
                            f"{len(label_vocabulary)}, n_classes={n_classes}, label_vocabulary={label_vocabulary}. "
                            "List one name per class.", field="label_vocabulary")
        super().__init__(n_classes, weight_column=weight_column, label_vocabulary=label_vocabulary,
                         loss_reduction=loss_reduction, loss_fn=loss_fn, name=name)

    @property
    def logits_dimension(self) -> int:
        return self._n_classes

    def _label_ids(self, logits: tf.Tensor, labels: Any) -> tf.Tensor:
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is None:
            if not labels.dtype.is_integer:
                raise HeadError(f"Labels dtype should be integer. Instead got {labels.dtype}. Feed class ids, or "
                                "strings with label_vocabulary.", field="labels")
            ids = labels
        else:
            if labels.dtype != tf.string:
                raise HeadError(f"Labels dtype should be string if there is a vocabulary. Instead got "
                                f"{labels.dtype}. Feed the class names, or drop label_vocabulary.", field="labels")
            ids = self._table("ids").lookup(labels)
        return _checks.check_label_range(ids, self._n_classes)

    def _unweighted_loss(self, logits: tf.Tensor, label_ids: tf.Tensor, features: Any) -> tf.Tensor:
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.squeeze(label_ids, -1), logits=logits)
        return tf.expand_dims(loss, -1)

    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        keys = self._keys(keys)
        logits = _checks.check_logits(logits, self._n_classes)
        with v1.name_scope("predictions"):
            out: dict[str, Any] = {LOGITS: logits} if LOGITS in keys else {}
            out.update(self._class_predictions(logits, logits, keys))
            return out

    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        km, key = keras_metrics(), self._summary_key
        with v1.name_scope("metrics"):
            metrics = {key("average_loss"): km.Mean(name="average_loss")}
            if regularization_losses is not None:
                metrics[key("regularization_loss")] = km.Mean(name="regularization_loss")
            metrics[key("accuracy")] = km.Accuracy(name="accuracy")
        return metrics

    def update_metrics(self, eval_metrics: dict[str, Any], features: Any, logits: Any, labels: Any,
                       mode: Any = None, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        class_ids = self.predictions(logits, [CLASS_IDS])[CLASS_IDS]
        _, label_ids, unweighted, weights = self._loss_and_weights(logits, labels, features)
        w = weights if isinstance(weights, tf.Tensor) else None
        eval_metrics[self._summary_key("average_loss")].update_state(unweighted, sample_weight=w)
        eval_metrics[self._summary_key("accuracy")].update_state(label_ids, class_ids, sample_weight=w)
        self._regularization_metric(eval_metrics, regularization_losses)
        return eval_metrics

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        from toolkit.estimator.export import PredictOutput
        classification = self._classification_output(predictions)
        return {DEFAULT_SERVING_KEY: classification, CLASSIFY_SERVING_KEY: classification,
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}


def _accuracy_baseline_class() -> type:
    """Built on first use: ``tf_keras`` is imported only by code that uses a head's metrics."""
    base = keras_metrics().Mean

    class _AccuracyBaseline(base):  # type: ignore[misc, valid-type]
        """max(label mean, 1 - label mean): the accuracy of always predicting the more frequent class."""

        def result(self) -> tf.Tensor:
            return tf.math.divide_no_nan(tf.maximum(self.total, self.count - self.total), self.count)

    return _AccuracyBaseline


def AccuracyBaseline(name: str) -> Any:  # noqa: N802 (a class built lazily)
    global _BASELINE
    if _BASELINE is None:
        _BASELINE = _accuracy_baseline_class()
    return _BASELINE(name=name)


_BASELINE: Any = None
