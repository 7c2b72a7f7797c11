"""``RegressionHead``, ``PoissonRegressionHead``, ``LogisticRegressionHead``: TF 2's regression heads.

The loss is the squared error per label value (Poisson: ``tf.nn.log_poisson_loss``;
logistic: sigmoid cross-entropy with labels in [0, 1]), weighted by
``weight_column`` (one weight per example, or per label value) and reduced by
``loss_reduction``. Metrics: ``average_loss``, ``label/mean``,
``prediction/mean``. Predictions: ``predictions`` (and ``logits`` when an
inverse link function maps logits to predictions). Export outputs:
``serving_default`` / ``regression`` (RegressionOutput) and ``predict``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.head import _checks
from toolkit.estimator.head._checks import SUM_OVER_BATCH_SIZE, HeadError
from toolkit.estimator.head.base import (
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    SingleHead,
    keras_metrics,
)
from toolkit.estimator.head.classification import broadcast_update, check_prediction_keys

__all__ = ["LogisticRegressionHead", "PoissonRegressionHead", "RegressionHead"]

v1 = tf.compat.v1


class RegressionHead(SingleHead):
    """``label_dimension`` real values per example, squared error (``tf.estimator.RegressionHead``).

    Args:
        label_dimension: the number of values in each label (the logits' last dimension).
        weight_column: a feature key or ``numeric_column``; one weight per example or per value.
        loss_reduction: ``tf.losses.Reduction`` other than NONE (default SUM_OVER_BATCH_SIZE:
            the weighted sum divided by ``batch_size * label_dimension``).
        loss_fn: ``loss_fn(labels, logits[, features])`` returning the loss per value.
        inverse_link_fn: maps logits to predictions (default: identity).
        name: suffix of the metric and summary keys, and the name scope.
    """

    def __init__(self, label_dimension: int = 1, weight_column: Any = None, loss_reduction: str = SUM_OVER_BATCH_SIZE,
                 loss_fn: Callable[..., Any] | None = None, inverse_link_fn: Callable[..., Any] | None = None,
                 name: str | None = None) -> None:
        if label_dimension < 1:
            raise HeadError(f"Invalid label_dimension {label_dimension}. It must be at least 1 (the number of values "
                            "in each label).", field="label_dimension")
        super().__init__(weight_column=weight_column, loss_reduction=loss_reduction, loss_fn=loss_fn, name=name)
        self._logits_dimension = label_dimension
        self._inverse_link_fn = inverse_link_fn

    @property
    def logits_dimension(self) -> int:
        return self._logits_dimension

    def _loss_and_weights(self, logits: Any, labels: Any, features: Any) -> tuple[tf.Tensor, tf.Tensor, Any, Any]:
        logits = _checks.check_logits(logits, self._logits_dimension)
        labels = tf.cast(_checks.check_labels(labels, logits, self._logits_dimension), tf.float32)
        if self._loss_fn:
            unweighted = _checks.call_loss_fn(self._loss_fn, labels, logits, features, self._logits_dimension)
        else:
            unweighted = tf.math.squared_difference(logits, labels)
        weights = _checks.weights_of(features, self._weight_column, logits, per_logit=True)
        return logits, labels, unweighted, weights

    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        logits = _checks.check_logits(logits, self._logits_dimension)
        with v1.name_scope("predictions"):
            if self._inverse_link_fn:
                out = {"predictions": self._inverse_link_fn(logits), "logits": logits}
            else:
                out = {"predictions": logits}
        if keys:
            check_prediction_keys(keys, list(out))
            out = {k: v for k, v in out.items() if k in keys}
        return out

    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        km, key = keras_metrics(), self._summary_key
        with v1.name_scope("metrics"):
            metrics = {key("average_loss"): km.Mean(name="average_loss"),
                       key("prediction/mean"): km.Mean(name="prediction/mean"),
                       key("label/mean"): km.Mean(name="label/mean")}
            if regularization_losses is not None:
                metrics[key("regularization_loss")] = km.Mean(name="regularization_loss")
        return metrics

    def update_metrics(self, eval_metrics: dict[str, Any], features: Any, logits: Any, labels: Any,
                       mode: Any = None, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        key = self._summary_key
        predicted = self.predictions(logits)["predictions"]
        _, labels, unweighted, weights = self._loss_and_weights(logits, labels, features)
        w = weights if isinstance(weights, tf.Tensor) else None
        eval_metrics[key("average_loss")].update_state(unweighted, sample_weight=w)
        eval_metrics[key("label/mean")].update_state(labels, sample_weight=w)
        broadcast_update(eval_metrics[key("prediction/mean")], predicted, w)
        self._regularization_metric(eval_metrics, regularization_losses)
        return eval_metrics

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        from toolkit.estimator.export import PredictOutput, RegressionOutput
        regression = RegressionOutput(value=predictions["predictions"])
        return {DEFAULT_SERVING_KEY: regression, REGRESS_SERVING_KEY: regression,
                PREDICT_SERVING_KEY: PredictOutput(dict(predictions))}


class PoissonRegressionHead(RegressionHead):
    """Poisson regression: ``tf.nn.log_poisson_loss`` on log-rates, predictions ``exp(logits)``.

    Args:
        compute_full_loss: include the constant Stirling term ``log(z!)`` (default True, as TF).
        label_dimension, weight_column, loss_reduction, name: as ``RegressionHead``'s.
    """

    def __init__(self, label_dimension: int = 1, weight_column: Any = None, loss_reduction: str = SUM_OVER_BATCH_SIZE,
                 compute_full_loss: bool = True, name: str | None = None) -> None:
        self._compute_full_loss = compute_full_loss
        super().__init__(label_dimension=label_dimension, weight_column=weight_column, loss_reduction=loss_reduction,
                         loss_fn=self._poisson_loss, inverse_link_fn=tf.math.exp, name=name)

    def _poisson_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.nn.log_poisson_loss(targets=labels, log_input=logits, compute_full_loss=self._compute_full_loss)


class LogisticRegressionHead(RegressionHead):
    """Labels are probabilities in [0, 1]; sigmoid cross-entropy, predictions ``sigmoid(logits)``.

    Unlike ``BinaryClassHead``: no vocabulary, no class predictions, no AUC; the
    default export output is a RegressionOutput.
    """

    def __init__(self, weight_column: Any = None, loss_reduction: str = SUM_OVER_BATCH_SIZE,
                 name: str | None = None) -> None:
        super().__init__(label_dimension=1, weight_column=weight_column, loss_reduction=loss_reduction,
                         loss_fn=self._logistic_loss, inverse_link_fn=tf.math.sigmoid, name=name)

    def _logistic_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        labels = _checks.check_label_range(labels, 2, message="Labels must be in range [0, 1]")
        return v1.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
