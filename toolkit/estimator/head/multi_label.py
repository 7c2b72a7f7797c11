"""``MultiLabelHead``: each example belongs to any subset of ``n_classes`` classes (``tf.estimator.MultiLabelHead``).

Labels are a multi-hot ``[batch, n_classes]`` tensor of 0/1, or a
SparseTensor of class ids (or of class strings, with ``label_vocabulary``).
The loss is the sigmoid cross-entropy averaged over the classes of each
example. Metrics: ``average_loss``, ``auc``, ``auc_precision_recall``; per
threshold accuracy/precision/recall; per class in
``classes_for_class_based_metrics``: ``probability_mean``, ``auc`` and
``auc_precision_recall`` (``/class<id>`` or ``/<name>``). Predictions:
``logits``, ``probabilities``, ``classes``.
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
    keras_metrics,
)
from toolkit.estimator.head.classification import _ClassificationHead

__all__ = ["MultiLabelHead"]

v1 = tf.compat.v1


def _class_ids(classes: Sequence[Any] | None, n_classes: int, vocabulary: Sequence[str] | None) -> tuple[int, ...]:
    if not classes:
        return ()
    classes = tuple(classes)
    if isinstance(classes[0], str):
        if not vocabulary:
            raise HeadError("label_vocabulary must be provided when classes_for_class_based_metrics are strings "
                            f"({list(classes)}); pass label_vocabulary or class ids.",
                            field="classes_for_class_based_metrics")
        missing = [c for c in classes if c not in vocabulary]
        if missing:
            raise HeadError(f"classes_for_class_based_metrics names {missing}, which are not in label_vocabulary "
                            f"{list(vocabulary)}.", field="classes_for_class_based_metrics")
        return tuple(list(vocabulary).index(c) for c in classes)
    for class_id in classes:
        if not 0 <= class_id < n_classes:
            raise HeadError(f"All classes_for_class_based_metrics must be in range [0, {n_classes - 1}]. Given: "
                            f"{class_id}.", field="classes_for_class_based_metrics")
    return classes


class MultiLabelHead(_ClassificationHead):
    """Multi-label classification with sigmoid cross-entropy.

    Args:
        n_classes: the number of classes, more than 1.
        weight_column: a feature key or ``numeric_column``; one weight per example.
        thresholds: floats in (0, 1) for accuracy, precision and recall on the probabilities.
        label_vocabulary: the class strings, when labels are a string SparseTensor.
        loss_reduction: ``tf.losses.Reduction`` other than NONE (default SUM_OVER_BATCH_SIZE).
        loss_fn: ``loss_fn(labels, logits[, features])`` returning one loss per example.
        classes_for_class_based_metrics: class ids or names with per-class metrics.
        name: suffix of the metric and summary keys, and the name scope.
    """

    _valid_keys = ("logits", "probabilities", "classes")

    def __init__(self, n_classes: int, weight_column: Any = None, thresholds: Sequence[float] | None = None,
                 label_vocabulary: Sequence[str] | None = None, loss_reduction: str = SUM_OVER_BATCH_SIZE,
                 loss_fn: Callable[..., Any] | None = None,
                 classes_for_class_based_metrics: Sequence[Any] | None = None, name: str | None = None) -> None:
        if n_classes is None or n_classes < 2:
            raise HeadError(f"n_classes must be > 1 for multi-label classification. Given: {n_classes}. Pass the "
                            "number of classes.", field="n_classes")
        thresholds = tuple(thresholds) if thresholds else ()
        for threshold in thresholds:
            if not 0.0 < threshold < 1.0:
                raise HeadError(f"thresholds must be in (0, 1) range. Given: {threshold}.", field="thresholds")
        if label_vocabulary is not None:
            if not isinstance(label_vocabulary, (list, tuple)):
                raise HeadError(f"label_vocabulary must be a list or tuple. Given type: {type(label_vocabulary)}.",
                                field="label_vocabulary")
            if len(label_vocabulary) != n_classes:
                raise HeadError(f"Length of label_vocabulary must be n_classes ({n_classes}). Given: "
                                f"{len(label_vocabulary)}. List one name per class.", field="label_vocabulary")
        super().__init__(n_classes, weight_column=weight_column, label_vocabulary=label_vocabulary,
                         loss_reduction=loss_reduction, loss_fn=loss_fn, name=name)
        self._thresholds = thresholds
        self._class_metrics = _class_ids(classes_for_class_based_metrics, n_classes, label_vocabulary)

    @property
    def logits_dimension(self) -> int:
        return self._n_classes

    def _label_ids(self, logits: tf.Tensor, labels: Any) -> tf.Tensor:
        if labels is None:
            raise HeadError("You must provide a labels Tensor. Given: None. Check that your input_fn returns "
                            "(features, labels).", field="labels")
        if isinstance(labels, (tf.SparseTensor, v1.SparseTensorValue)):
            labels = tf.SparseTensor.from_value(labels)
            if labels.dtype == tf.string:
                ids = tf.SparseTensor(labels.indices, self._table("ids").lookup(labels.values), labels.dense_shape)
            else:
                if not labels.dtype.is_integer:
                    raise HeadError(f"Labels dtype should be integer. Instead got {labels.dtype}.", field="labels")
                message = f"labels must be an integer SparseTensor with values in [0, {self._n_classes})"
                values = _checks.check_label_range(labels.values, self._n_classes, message=message)
                ids = tf.SparseTensor(labels.indices, values, labels.dense_shape)
            dense = tf.cast(tf.sparse.to_indicator(ids, self._n_classes), tf.int64)
        else:
            dense = _checks.check_label_range(
                v1.convert_to_tensor(labels), 2,
                message="labels must be an integer indicator Tensor with values in [0, 1]")
        return _checks.check_labels(dense, logits, self._n_classes)

    def _unweighted_loss(self, logits: tf.Tensor, label_ids: tf.Tensor, features: Any) -> tf.Tensor:
        per_class = v1.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(label_ids, tf.float32), logits=logits)
        return tf.reduce_mean(per_class, axis=-1, keepdims=True)

    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        keys = self._keys(keys)
        logits = _checks.check_logits(logits, self._n_classes)
        out: dict[str, Any] = {}
        with v1.name_scope("predictions"):
            if "logits" in keys:
                out["logits"] = logits
            if "probabilities" in keys:
                out["probabilities"] = tf.sigmoid(logits, name="probabilities")
            if "classes" in keys:
                out["classes"] = self._all_class_names(logits)
        return out

    def _class_name(self, class_id: int) -> str:
        return self._label_vocabulary[class_id] if self._label_vocabulary else f"class{class_id}"

    def _class_keys(self, class_id: int) -> tuple[str, str, str]:
        name = self._class_name(class_id)
        return tuple(self._summary_key(f"{kind}/{name}")  # type: ignore[return-value]
                     for kind in ("probability_mean", "auc", "auc_precision_recall"))

    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        km, key = keras_metrics(), self._summary_key
        with v1.name_scope("metrics"):
            metrics = {key("average_loss"): km.Mean(name="average_loss"), key("auc"): km.AUC(name="auc"),
                       key("auc_precision_recall"): km.AUC(curve="PR", name="auc_precision_recall")}
            if regularization_losses is not None:
                metrics[key("regularization_loss")] = km.Mean(name="regularization_loss")
            metrics.update(self._threshold_metrics(self._thresholds))
            for class_id in self._class_metrics:
                prob, auc, auc_pr = self._class_keys(class_id)
                metrics[prob] = km.Mean(name=prob)
                metrics[auc] = km.AUC(name=auc)
                metrics[auc_pr] = km.AUC(curve="PR", name=auc_pr)
        return metrics

    def update_metrics(self, eval_metrics: dict[str, Any], features: Any, logits: Any, labels: Any,
                       mode: Any = None, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        key = self._summary_key
        logits, labels, unweighted, weights = self._loss_and_weights(logits, labels, features)
        probabilities = self.predictions(logits, ["probabilities"])["probabilities"]
        w = weights if isinstance(weights, tf.Tensor) else None
        eval_metrics[key("average_loss")].update_state(unweighted, sample_weight=w)
        for name in ("auc", "auc_precision_recall"):
            eval_metrics[key(name)].update_state(labels, probabilities, sample_weight=w)
        self._regularization_metric(eval_metrics, regularization_losses)
        for t in self._thresholds:
            for metric_key in self._threshold_keys(t):
                eval_metrics[metric_key].update_state(labels, probabilities, sample_weight=w)
        for class_id in self._class_metrics:
            prob, auc, auc_pr = self._class_keys(class_id)
            class_probs = probabilities[..., class_id:class_id + 1]
            class_labels = labels[..., class_id:class_id + 1]
            eval_metrics[prob].update_state(class_probs, sample_weight=w)
            eval_metrics[auc].update_state(class_labels, class_probs, sample_weight=w)
            eval_metrics[auc_pr].update_state(class_labels, class_probs, sample_weight=w)
        return eval_metrics

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        from toolkit.estimator.export import ClassificationOutput, PredictOutput
        classification = ClassificationOutput(scores=predictions["probabilities"], classes=predictions["classes"])
        return {DEFAULT_SERVING_KEY: classification, CLASSIFY_SERVING_KEY: classification,
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}
