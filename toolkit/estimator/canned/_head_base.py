"""What every canned head shares: reading labels and weights, reducing the loss, assembling the spec.

A head turns logits into predictions, a loss, metrics and export outputs,
following TF 2's ``tf.estimator`` heads (``BinaryClassHead``,
``MultiClassHead``, ``RegressionHead``) written as TF1 graph code:
``tf.compat.v1.metrics`` pairs instead of Keras metric objects and a
``train_op_fn(loss)`` that builds a ``tf.compat.v1.train`` update.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.head.base import (  # one set of signature and mode names for both kinds of head
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    EVAL,
    PREDICT,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    TRAIN,
)

__all__ = [
    "CLASSIFY_SERVING_KEY",
    "DEFAULT_SERVING_KEY",
    "EVAL",
    "PREDICT",
    "PREDICT_SERVING_KEY",
    "REGRESS_SERVING_KEY",
    "TRAIN",
    "Head",
    "make_spec",
]

v1 = tf.compat.v1


def make_spec(**fields: Any) -> Any:
    """An ``EstimatorSpec`` of the graph engine (imported late: the engine imports TF1 machinery)."""
    from toolkit.estimator import EstimatorSpec
    return EstimatorSpec(**fields)


class Head:
    """Base of the three canned heads; subclasses define the label handling, loss, predictions and metrics."""

    logits_dimension: int = 1
    label_dimension: int = 1
    shape_hint = "Return one label per example."

    def __init__(self, *, weight_column: Any = None, loss_reduction: str = "weighted_sum_over_batch_size") -> None:
        self.weight_column = weight_column
        self.loss_reduction = loss_reduction

    # -- subclass hooks ------------------------------------------------------------------------------
    def predictions(self, logits: tf.Tensor) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    def processed_labels(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def unweighted_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def metrics(self, *, labels: tf.Tensor, predictions: Mapping[str, tf.Tensor], unweighted_loss: tf.Tensor,
                weights: tf.Tensor | None) -> dict[str, tuple[tf.Tensor, Any]]:
        raise NotImplementedError

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        raise NotImplementedError

    # -- shared machinery ---------------------------------------------------------------------------
    def labels_tensor(self, labels: Any, logits: tf.Tensor, mode: str) -> tf.Tensor:
        """Dense labels of shape ``[batch, label_dimension]``; refuses what the head cannot read."""
        if labels is None:
            raise CannedError(f"input_fn returned no labels in mode {mode!r}; training and evaluation "
                              "need them. Return (features, labels) from input_fn.", field="labels")
        if isinstance(labels, Mapping):
            raise CannedError(f"input_fn returned labels as a dict with keys {sorted(labels)}; a canned "
                              "estimator has one head, so return the label tensor itself.", field="labels")
        if isinstance(labels, (tf.SparseTensor, v1.SparseTensorValue)):
            raise CannedError("input_fn returned labels as a SparseTensor; expected a dense Tensor of "
                              "shape [batch] or [batch, 1]. Convert with tf.sparse.to_dense(labels).", field="labels")
        labels = v1.convert_to_tensor(labels)
        expected = self.label_dimension
        if labels.shape.ndims == 1 and logits.shape.ndims == 2:
            labels = tf.expand_dims(labels, -1)
        if labels.shape.ndims is not None and labels.shape.ndims >= 2:
            last = labels.shape[-1]
            if last is not None and last != expected:
                raise CannedError(f"labels have shape {labels.shape.as_list()} but this estimator expects "
                                  f"[batch, {expected}]. {self.shape_hint}", field="labels")
        return labels

    def weights(self, features: Mapping[str, Any]) -> tf.Tensor | None:
        """Per-example weights ``[batch, 1]`` (float32) from ``weight_column``, or None."""
        column = self.weight_column
        if column is None:
            return None
        key = column if isinstance(column, str) else column.key
        if key not in features:
            raise CannedError(f"`weight_column` is {key!r} but the features have no such key "
                              f"(keys: {sorted(features)}). Add the weights to the features input_fn returns.",
                              field="weight_column")
        if isinstance(column, str):
            column = tf.feature_column.numeric_column(key, shape=(1,))
        with v1.name_scope("weights"):
            value = v1.feature_column.input_layer({key: features[key]}, [column])
            return tf.cast(value, tf.float32)

    def loss(self, unweighted: tf.Tensor, weights: tf.Tensor | None) -> tf.Tensor:
        return v1.losses.compute_weighted_loss(unweighted, weights=1.0 if weights is None else weights,
                                               reduction=self.loss_reduction, loss_collection=None)

    def build(self, *, features: Mapping[str, Any], mode: str, logits: tf.Tensor, labels: Any = None,
              train_op_fn: Callable[[tf.Tensor], Any] | None = None) -> dict[str, Any]:
        """The fields of the EstimatorSpec for ``mode`` (a dict, so tests can look inside)."""
        logits = tf.cast(logits, tf.float32)
        with v1.name_scope("head"):
            predictions = self.predictions(logits)
            if mode == PREDICT:
                return {"mode": mode, "predictions": predictions, "export_outputs": self.export_outputs(predictions)}
            processed = self.processed_labels(self.labels_tensor(labels, logits, mode), logits)
            unweighted = self.unweighted_loss(processed, logits)
            weights = self.weights(features)
            loss = self.loss(unweighted, weights)
            if mode == EVAL:
                metrics = self.metrics(labels=processed, predictions=predictions, unweighted_loss=unweighted,
                                       weights=weights)
                return {"mode": mode, "predictions": predictions, "loss": loss, "eval_metric_ops": metrics}
        if train_op_fn is None:  # (the engine writes the 'loss' summary, as TF's did when the head had not)
            raise CannedError("the head needs train_op_fn(loss) in mode 'train'.", field="train_op_fn")
        return {"mode": mode, "predictions": predictions, "loss": loss, "train_op": train_op_fn(loss)}

    def create_estimator_spec(self, **kwargs: Any) -> Any:
        return make_spec(**self.build(**kwargs))


def broadcast(weights: tf.Tensor | None, values: tf.Tensor) -> tf.Tensor | None:
    """Weights shaped like ``values`` for ``tf.compat.v1.metrics`` (None stays None)."""
    if weights is None:
        return None
    return tf.broadcast_to(weights, tf.shape(values))
