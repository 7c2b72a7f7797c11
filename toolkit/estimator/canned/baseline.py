"""``BaselineClassifier``, ``BaselineRegressor``, ``BaselineEstimator``: a model that ignores its features.

As TF 2's: the logits are one learned bias vector (``baseline/bias``, one
value per logit) for every example, so a classifier learns the class prior
and a regressor the label mean. A baseline gives the number a real model has
to beat. The features only give the batch size.

Example:
    >>> est = BaselineClassifier(n_classes=3)          # doctest: +SKIP
    >>> est.train(input_fn, max_steps=100)             # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator import Estimator
from toolkit.estimator.canned import _args
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned.head_based import check_head
from toolkit.estimator.canned.optimizers import check_optimizer, get_optimizer
from toolkit.estimator.head._checks import SUM_OVER_BATCH_SIZE

__all__ = ["BaselineClassifier", "BaselineEstimator", "BaselineRegressor", "baseline_logits"]

v1 = tf.compat.v1
_LEARNING_RATE = 0.3  # TF's baseline estimators, for an optimizer given by name


def _batch_size(features: Any) -> tf.Tensor:
    if isinstance(features, Mapping):
        if not features:
            raise CannedError("input_fn returned no features; a baseline reads the batch size from them. Return "
                              "at least one feature.", field="features")
        features = features[sorted(features)[0]]
    if isinstance(features, tf.SparseTensor):
        return features.dense_shape[0]
    return tf.shape(v1.convert_to_tensor(features), out_type=tf.int64)[0]


def baseline_logits(features: Any, logits_dimension: int) -> tuple[Any, tf.Tensor]:
    """The ``baseline/bias`` variable (zeros) and the logits: that bias repeated for each example."""
    batch = _batch_size(features)
    with v1.variable_scope("baseline"):
        bias = v1.get_variable("bias", shape=[logits_dimension], initializer=v1.zeros_initializer())
    return bias, tf.tile(tf.expand_dims(bias, 0), tf.stack([batch, tf.constant(1, tf.int64)]))


def _baseline_estimator(self: Estimator, head: Any, *, optimizer: Any, model_dir: Any, config: Any,
                        warm_start_from: Any = None) -> None:
    optimizer = check_optimizer("optimizer", optimizer)

    def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        del config
        bias, logits = baseline_logits(features, head.logits_dimension)

        def train_op_fn(loss: tf.Tensor) -> Any:
            opt = get_optimizer("optimizer", optimizer, learning_rate=_LEARNING_RATE)
            return opt.minimize(loss, global_step=v1.train.get_or_create_global_step(), var_list=[bias])

        if mode == "train" and logits.shape[-1] == 1:
            v1.summary.scalar("bias", bias[0])
        return head.create_estimator_spec(features=features, mode=mode, logits=logits, labels=labels,
                                          train_op_fn=train_op_fn if mode == "train" else None)

    Estimator.__init__(self, _model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)
    self.head = head


def _classification_head(n_classes: Any, weight_column: Any, label_vocabulary: Any, loss_reduction: Any) -> Any:
    from toolkit.estimator.head import BinaryClassHead, MultiClassHead
    n_classes = _args.check_n_classes(n_classes)
    vocabulary = _args.check_label_vocabulary(label_vocabulary, n_classes)
    weight = _args.check_weight_column(weight_column)
    if n_classes == 2:
        return BinaryClassHead(weight_column=weight, label_vocabulary=vocabulary, loss_reduction=loss_reduction)
    return MultiClassHead(n_classes, weight_column=weight, label_vocabulary=vocabulary,
                          loss_reduction=loss_reduction)


class BaselineClassifier(Estimator):
    """Predicts the class prior whatever the features (``tf.estimator.BaselineClassifier``).

    Args:
        model_dir: where checkpoints go (or ``config.model_dir``).
        n_classes: 2 (a sigmoid head) or more (a softmax head).
        weight_column: name of (or ``numeric_column`` for) per-example weights.
        label_vocabulary: the label strings, when labels are strings.
        optimizer: a name (learning rate 0.3, TF's), an optimizer instance or a function returning one.
        config: a ``RunConfig``.
        loss_reduction: ``tf.losses.Reduction`` other than NONE (default SUM_OVER_BATCH_SIZE).
    """

    def __init__(self, model_dir: str | os.PathLike | None = None, n_classes: int = 2, weight_column: Any = None,
                 label_vocabulary: Sequence[str] | None = None, optimizer: Any = "Ftrl", config: Any = None,
                 loss_reduction: str = SUM_OVER_BATCH_SIZE) -> None:
        head = _classification_head(n_classes, weight_column, label_vocabulary, loss_reduction)
        _baseline_estimator(self, head, optimizer=optimizer, model_dir=model_dir, config=config)


class BaselineRegressor(Estimator):
    """Predicts the label mean whatever the features (``tf.estimator.BaselineRegressor``).

    Args are ``BaselineClassifier``'s, with ``label_dimension`` (values per
    label, default 1) instead of ``n_classes`` and ``label_vocabulary``.
    """

    def __init__(self, model_dir: str | os.PathLike | None = None, label_dimension: int = 1,
                 weight_column: Any = None, optimizer: Any = "Ftrl", config: Any = None,
                 loss_reduction: str = SUM_OVER_BATCH_SIZE) -> None:
        from toolkit.estimator.head import RegressionHead
        head = RegressionHead(label_dimension=_args.check_label_dimension(label_dimension),
                              weight_column=_args.check_weight_column(weight_column), loss_reduction=loss_reduction)
        _baseline_estimator(self, head, optimizer=optimizer, model_dir=model_dir, config=config)


class BaselineEstimator(Estimator):
    """A learned bias under any ``head`` (``tf.estimator.BaselineEstimator``).

    Args:
        head: the ``Head`` computing loss, metrics and predictions.
        model_dir, optimizer, config: as ``BaselineClassifier``'s.
    """

    def __init__(self, head: Any, model_dir: str | os.PathLike | None = None, optimizer: Any = "Ftrl",
                 config: Any = None) -> None:
        _baseline_estimator(self, check_head(head), optimizer=optimizer, model_dir=model_dir, config=config)
