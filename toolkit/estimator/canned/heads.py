"""The canned heads: binary and multi-class classification, regression (TF 2's semantics, in TF1 graph code).

Their prediction keys, metrics and export signatures are TF 2's, listed in
``toolkit.estimator.canned``; the loss is reduced by ``loss_reduction``
(default: the weighted sum over the batch size).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned import _args
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._head_base import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    Head,
    broadcast,
)
from toolkit.estimator.export import ClassificationOutput, PredictOutput, RegressionOutput

__all__ = ["BinaryClassHead", "MultiClassHead", "RegressionHead", "classification_head", "classifier_head",
           "regressor_head"]

v1 = tf.compat.v1


def _assert(condition: tf.Tensor, labels: tf.Tensor, message: str) -> Any:
    """A runtime check whose error carries ``message`` and the offending batch of labels."""
    return tf.debugging.Assert(condition, [message, "labels received:", labels], summarize=8)


class _ClassHead(Head):
    """Label ids from integer labels or through ``label_vocabulary``; class strings back out."""

    shape_hint = "Return one class per example, shape [batch] or [batch, 1]."

    def __init__(self, *, n_classes: int, label_vocabulary: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_classes = n_classes
        self.label_vocabulary = tuple(label_vocabulary) if label_vocabulary else None

    def label_ids(self, labels: tf.Tensor, *, allow_float: bool) -> tf.Tensor:
        vocab = self.label_vocabulary
        if vocab is not None:
            if labels.dtype != tf.string:
                raise CannedError(f"labels are {labels.dtype.name} but `label_vocabulary` is "
                                  f"{list(vocab)!r}; with a vocabulary the labels must be those strings. Drop "
                                  "label_vocabulary to use integer class ids.", field="labels")
            table = v1.lookup.StaticHashTable(
                v1.lookup.KeyValueTensorInitializer(list(vocab), list(range(len(vocab))), tf.string, tf.int64),
                default_value=-1, name="class_id_lookup")
            ids = table.lookup(labels)
            check = _assert(tf.reduce_all(ids >= 0), labels,
                            f"`labels` holds a value that is not in label_vocabulary [{', '.join(vocab)}]; every label "
                            "must be one of them. Fix the data, or add the value to label_vocabulary (and n_classes).")
            with tf.control_dependencies([check]):
                return tf.identity(ids)
        if labels.dtype == tf.string:
            raise CannedError("labels are strings but no `label_vocabulary` was given; pass "
                              "label_vocabulary=[...] listing the classes, or feed integer class ids.", field="labels")
        if not (labels.dtype.is_integer or labels.dtype.is_bool or (allow_float and labels.dtype.is_floating)):
            raise CannedError(f"labels are {labels.dtype.name}; expected integer class ids in "
                              f"[0, {self.n_classes - 1}] (n_classes={self.n_classes}), or strings with "
                              "label_vocabulary.", field="labels")
        if labels.dtype.is_bool:
            return labels
        top = tf.cast(self.n_classes - 1, labels.dtype)
        check = _assert(tf.reduce_all((labels >= 0) & (labels <= top)), labels,
                        f"`labels` holds a value outside [0, {self.n_classes - 1}] (n_classes={self.n_classes}); "
                        "fix the data or n_classes.")
        with tf.control_dependencies([check]):
            return tf.identity(labels)

    def class_strings(self, class_ids: tf.Tensor) -> tf.Tensor:
        if self.label_vocabulary is None:
            return tf.strings.as_string(class_ids, name="str_classes")
        table = v1.lookup.StaticHashTable(
            v1.lookup.KeyValueTensorInitializer(list(range(self.n_classes)), list(self.label_vocabulary),
                                                tf.int64, tf.string),
            default_value="UNK", name="class_string_lookup")
        return table.lookup(class_ids)

    def all_classes(self, logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        batch = tf.shape(logits)[0]
        ids = tf.tile(tf.expand_dims(tf.range(self.n_classes), 0), [batch, 1])
        names = (tf.constant(list(self.label_vocabulary)) if self.label_vocabulary
                 else tf.strings.as_string(tf.range(self.n_classes)))
        return ids, tf.tile(tf.expand_dims(names, 0), [batch, 1])

    def class_predictions(self, logits: tf.Tensor, class_logits: tf.Tensor) -> dict[str, tf.Tensor]:
        class_ids = tf.expand_dims(tf.argmax(class_logits, axis=-1), -1, name="class_ids")
        all_ids, all_names = self.all_classes(logits)
        return {"logits": logits, "probabilities": tf.nn.softmax(class_logits, name="probabilities"),
                "class_ids": class_ids, "classes": self.class_strings(class_ids),
                "all_class_ids": all_ids, "all_classes": all_names}

    def classification_output(self, predictions: Mapping[str, tf.Tensor]) -> Any:
        return ClassificationOutput(scores=predictions["probabilities"], classes=predictions["all_classes"])


class BinaryClassHead(_ClassHead):
    """Two classes, one logit, sigmoid cross-entropy; labels in [0, 1] (floats allowed) or two strings."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(n_classes=2, **kwargs)

    def processed_labels(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.cast(self.label_ids(labels, allow_float=True), tf.float32)

    def unweighted_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)

    def predictions(self, logits: tf.Tensor) -> dict[str, tf.Tensor]:
        two_class_logits = tf.concat([tf.zeros_like(logits), logits], axis=-1, name="two_class_logits")
        predictions = self.class_predictions(logits, two_class_logits)
        predictions["logistic"] = tf.sigmoid(logits, name="logistic")
        return predictions

    def metrics(self, *, labels: tf.Tensor, predictions: Mapping[str, tf.Tensor], unweighted_loss: tf.Tensor,
                weights: tf.Tensor | None) -> dict[str, tuple[tf.Tensor, Any]]:
        m = v1.metrics
        class_ids, logistic = predictions["class_ids"], predictions["logistic"]
        w = broadcast(weights, labels)
        label_mean = m.mean(labels, weights=w, name="label/mean")
        baseline = tuple(tf.maximum(x, 1.0 - x, name="accuracy_baseline") for x in label_mean)
        return {
            "accuracy": m.accuracy(labels, tf.cast(class_ids, tf.float32), weights=w, name="accuracy"),
            "precision": m.precision(labels, class_ids, weights=w, name="precision"),
            "recall": m.recall(labels, class_ids, weights=w, name="recall"),
            "auc": m.auc(labels, logistic, weights=w, curve="ROC", summation_method="careful_interpolation",
                         name="auc"),
            "auc_precision_recall": m.auc(labels, logistic, weights=w, curve="PR",
                                          summation_method="careful_interpolation", name="auc_precision_recall"),
            "average_loss": m.mean(unweighted_loss, weights=broadcast(weights, unweighted_loss), name="average_loss"),
            "label/mean": label_mean,
            "prediction/mean": m.mean(logistic, weights=w, name="prediction/mean"),
            "accuracy_baseline": baseline,
        }

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        classification = self.classification_output(predictions)
        return {DEFAULT_SERVING_KEY: classification, CLASSIFY_SERVING_KEY: classification,
                REGRESS_SERVING_KEY: RegressionOutput(value=predictions["logistic"]),
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}


class MultiClassHead(_ClassHead):
    """``n_classes`` > 2 logits, sparse softmax cross-entropy; integer labels or strings from the vocabulary."""

    def __init__(self, *, n_classes: int, **kwargs: Any) -> None:
        super().__init__(n_classes=n_classes, **kwargs)
        self.logits_dimension = n_classes

    def processed_labels(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.cast(self.label_ids(labels, allow_float=False), tf.int64)

    def unweighted_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.squeeze(labels, -1), logits=logits)
        return tf.expand_dims(loss, -1)

    def predictions(self, logits: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.class_predictions(logits, logits)

    def metrics(self, *, labels: tf.Tensor, predictions: Mapping[str, tf.Tensor], unweighted_loss: tf.Tensor,
                weights: tf.Tensor | None) -> dict[str, tuple[tf.Tensor, Any]]:
        w = broadcast(weights, labels)
        return {"accuracy": v1.metrics.accuracy(labels, predictions["class_ids"], weights=w, name="accuracy"),
                "average_loss": v1.metrics.mean(unweighted_loss, weights=w, name="average_loss")}

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        classification = self.classification_output(predictions)
        return {DEFAULT_SERVING_KEY: classification, CLASSIFY_SERVING_KEY: classification,
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}


class RegressionHead(Head):
    """``label_dimension`` real values per example, squared error."""

    shape_hint = "Pass label_dimension equal to the number of values in each label."

    def __init__(self, *, label_dimension: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.label_dimension = self.logits_dimension = label_dimension

    def processed_labels(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        if not (labels.dtype.is_floating or labels.dtype.is_integer):
            raise CannedError(f"labels are {labels.dtype.name}; a regressor expects numbers. Convert "
                              "them in input_fn, or use a classifier with label_vocabulary for strings.",
                              field="labels")
        return tf.cast(labels, tf.float32)

    def unweighted_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.math.squared_difference(logits, labels)

    def predictions(self, logits: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"predictions": tf.identity(logits, name="predictions")}

    def metrics(self, *, labels: tf.Tensor, predictions: Mapping[str, tf.Tensor], unweighted_loss: tf.Tensor,
                weights: tf.Tensor | None) -> dict[str, tuple[tf.Tensor, Any]]:
        m = v1.metrics
        w = broadcast(weights, labels)
        return {"average_loss": m.mean(unweighted_loss, weights=w, name="average_loss"),
                "label/mean": m.mean(labels, weights=w, name="label/mean"),
                "prediction/mean": m.mean(predictions["predictions"], weights=w, name="prediction/mean")}

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        regression = RegressionOutput(value=predictions["predictions"])
        return {DEFAULT_SERVING_KEY: regression, REGRESS_SERVING_KEY: regression,
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}


def classification_head(*, n_classes: int, **kwargs: Any) -> Head:
    """TF's rule: a binary head for two classes, a multi-class head otherwise."""
    if n_classes == 2:
        return BinaryClassHead(**kwargs)
    return MultiClassHead(n_classes=n_classes, **kwargs)


def classifier_head(n_classes: Any, label_vocabulary: Any, weight_column: Any, loss_reduction: Any) -> Head:
    """The head of a canned classifier, from its checked constructor arguments."""
    n_classes = _args.check_n_classes(n_classes)
    return classification_head(n_classes=n_classes,
                               label_vocabulary=_args.check_label_vocabulary(label_vocabulary, n_classes),
                               weight_column=_args.check_weight_column(weight_column),
                               loss_reduction=_args.check_loss_reduction(loss_reduction))


def regressor_head(label_dimension: Any, weight_column: Any, loss_reduction: Any) -> Head:
    """The head of a canned regressor, from its checked constructor arguments."""
    return RegressionHead(label_dimension=_args.check_label_dimension(label_dimension),
                          weight_column=_args.check_weight_column(weight_column),
                          loss_reduction=_args.check_loss_reduction(loss_reduction))
