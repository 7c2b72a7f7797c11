"""``Head``: the top of a model, from logits to predictions, loss, metrics, train op and export outputs.

As ``tf.estimator.Head`` in TF 2: ``loss``, ``predictions``, ``metrics`` and
``update_metrics`` work eagerly (a custom training loop) and in a graph;
``create_estimator_spec`` returns the ``EstimatorSpec`` a model_fn returns.
Metrics are ``tf_keras`` metric objects (Keras 2, which runs in TF1 graphs;
Keras 3's do not); in the spec they become ``(value, update_op)`` pairs, their
variables local variables, as ``tf.estimator.EstimatorSpec`` made them.

Example:
    >>> def model_fn(features, labels, mode):                        # doctest: +SKIP
    ...     head = toolkit.estimator.BinaryClassHead()
    ...     logits = tf.compat.v1.layers.dense(features["x"], head.logits_dimension)
    ...     return head.create_estimator_spec(
    ...         features=features, mode=mode, labels=labels, logits=logits,
    ...         train_op_fn=lambda loss: tf.compat.v1.train.AdagradOptimizer(0.1).minimize(
    ...             loss, global_step=tf.compat.v1.train.get_global_step()))
"""
from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.head import _checks
from toolkit.estimator.head._checks import HeadError

__all__ = ["CLASSIFY_SERVING_KEY", "DEFAULT_SERVING_KEY", "PREDICT_SERVING_KEY", "REGRESS_SERVING_KEY", "Head",
           "SingleHead"]

v1 = tf.compat.v1
DEFAULT_SERVING_KEY = "serving_default"
CLASSIFY_SERVING_KEY = "classification"
REGRESS_SERVING_KEY = "regression"
PREDICT_SERVING_KEY = "predict"
TRAIN, EVAL, PREDICT = "train", "eval", "infer"


def keras_metrics() -> Any:
    """``tf_keras.metrics``: Keras 2's metrics run in TF1 graphs (Keras 3's only eagerly)."""
    import tf_keras
    return tf_keras.metrics


def metric_ops(metrics: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (value, update_op)}`` from updated metric objects; their variables become local variables."""
    ops = {}
    for key, metric in metrics.items():
        if isinstance(metric, tuple):
            ops[key] = metric
            continue
        for var in metric.variables:
            v1.add_to_collections([v1.GraphKeys.LOCAL_VARIABLES, v1.GraphKeys.METRIC_VARIABLES], var)
        updates = list(metric.updates)
        ops[key] = (metric.result(), tf.group(*updates) if updates else tf.no_op())
    return ops


class Head(abc.ABC):
    """Interface of a head; subclasses define ``loss``, ``predictions``, ``metrics`` and ``update_metrics``.

    A subclass that also defines ``export_outputs(predictions)`` gets TF's
    ``create_estimator_spec`` for free: predictions and export outputs in
    PREDICT, the loss and updated metrics in EVAL, the loss, train op and
    ``loss`` summary in TRAIN.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str | None:
        """The head's name: metric and summary keys end in ``/name`` when set."""

    @property
    @abc.abstractmethod
    def logits_dimension(self) -> int:
        """The size of the logits' last dimension."""

    @property
    @abc.abstractmethod
    def loss_reduction(self) -> str:
        """How the training loss is reduced over the batch (a ``tf.losses.Reduction`` value)."""

    @abc.abstractmethod
    def loss(self, labels: Any, logits: Any, features: Any = None, mode: Any = None,
             regularization_losses: Sequence[Any] | None = None) -> tf.Tensor:
        """The scalar training loss (plus the regularization losses)."""

    @abc.abstractmethod
    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        """The predictions for ``keys`` (all of the head's keys by default)."""

    @abc.abstractmethod
    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        """Fresh metric objects, keyed by metric name."""

    @abc.abstractmethod
    def update_metrics(self, eval_metrics: dict[str, Any], features: Any, logits: Any, labels: Any,
                       mode: Any = None, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        """Updates ``eval_metrics`` with one batch and returns them."""

    def export_outputs(self, predictions: Mapping[str, tf.Tensor]) -> dict[str, Any]:
        """The SavedModel signatures of PREDICT mode (default: every prediction)."""
        from toolkit.estimator.export import PredictOutput
        output = PredictOutput(dict(predictions))
        return {DEFAULT_SERVING_KEY: output, PREDICT_SERVING_KEY: output}

    _default_scope = "head"

    def _summary_key(self, key: str) -> str:
        return f"{key}/{self.name}" if self.name else key

    def _regularization_metric(self, metrics: dict[str, Any], regularization_losses: Sequence[Any] | None) -> None:
        if regularization_losses is not None:
            metrics[self._summary_key("regularization_loss")].update_state(tf.math.add_n(list(regularization_losses)))

    def _train_summary_key(self, key: str) -> str:
        """The tag of the training-loss summaries (``loss/<name>`` for a named head)."""
        return self._summary_key(key)

    def create_estimator_spec(self, features: Any, mode: str, logits: Any, labels: Any = None, optimizer: Any = None,
                              trainable_variables: Any = None, train_op_fn: Any = None, update_ops: Any = None,
                              regularization_losses: Sequence[Any] | None = None) -> Any:
        """The ``EstimatorSpec`` for ``mode`` (exactly one of ``optimizer`` and ``train_op_fn`` in TRAIN)."""
        from toolkit.estimator import EstimatorSpec
        with v1.name_scope(self.name, default_name=self._default_scope):
            predictions = self.predictions(logits)
            if mode == PREDICT:
                return EstimatorSpec(mode=mode, predictions=predictions,
                                     export_outputs=self.export_outputs(predictions), scaffold=v1.train.Scaffold())
            loss = self.loss(labels, logits, features, mode, regularization_losses)
            if mode == EVAL:
                metrics = self.update_metrics(self.metrics(regularization_losses=regularization_losses), features,
                                              logits, labels, regularization_losses=regularization_losses)
                ops = metrics if tf.executing_eagerly() else metric_ops(metrics)
                return EstimatorSpec(mode=mode, predictions=predictions, loss=loss, eval_metric_ops=ops,
                                     scaffold=v1.train.Scaffold())
            if mode != TRAIN:
                raise HeadError(f"create_estimator_spec `mode` is {mode!r}; expected ModeKeys.TRAIN, EVAL or "
                                "PREDICT. Pass the mode model_fn received.", field="mode")
            op = _checks.train_op(loss=loss, optimizer=optimizer, trainable_variables=trainable_variables,
                                  train_op_fn=train_op_fn, update_ops=update_ops, loss_reduction=self.loss_reduction)
        _checks.write_summaries(loss, regularization_losses, self._train_summary_key)
        return EstimatorSpec(mode=mode, predictions=predictions, loss=loss, train_op=op,
                             scaffold=v1.train.Scaffold())


class SingleHead(Head):
    """A head over one kind of label: the shared arguments, properties and ``loss``.

    Subclasses define ``_loss_and_weights(logits, labels, features)`` returning
    ``(logits, processed labels, unweighted loss, weights)``.
    """

    def __init__(self, *, weight_column: Any, loss_reduction: str, loss_fn: Callable[..., Any] | None,
                 name: str | None) -> None:
        _checks.check_loss_reduction(loss_reduction)
        if loss_fn:
            _checks.check_loss_fn(loss_fn)
        self._weight_column = weight_column
        self._loss_reduction = loss_reduction
        self._loss_fn = loss_fn
        self._name = name

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def loss_reduction(self) -> str:
        return self._loss_reduction

    @property
    def weight_column(self) -> Any:
        return self._weight_column

    def _loss_and_weights(self, logits: Any, labels: Any, features: Any) -> tuple[tf.Tensor, tf.Tensor, Any, Any]:
        raise NotImplementedError

    def _threshold_keys(self, t: float) -> tuple[str, ...]:
        kinds = ("accuracy", "precision", "recall")
        return tuple(self._summary_key(f"{kind}/positive_threshold_%g" % t) for kind in kinds)

    def _threshold_metrics(self, thresholds: Sequence[float]) -> dict[str, Any]:
        """Accuracy, precision and recall of the probabilities at each threshold."""
        km, metrics = keras_metrics(), {}
        for t in thresholds:
            accuracy, precision, recall = self._threshold_keys(t)
            metrics[accuracy] = km.BinaryAccuracy(name=accuracy, threshold=t)
            metrics[precision] = km.Precision(name=precision, thresholds=t)
            metrics[recall] = km.Recall(name=recall, thresholds=t)
        return metrics

    def loss(self, labels: Any, logits: Any, features: Any = None, mode: Any = None,
             regularization_losses: Sequence[Any] | None = None) -> tf.Tensor:
        del mode
        with v1.name_scope("losses"):
            _, _, unweighted, weights = self._loss_and_weights(logits, labels, features)
            loss = _checks.reduce_loss(unweighted, weights, self._loss_reduction)
            return _checks.regularized(loss, regularization_losses)
