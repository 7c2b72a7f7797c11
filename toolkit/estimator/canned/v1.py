"""The canned estimators as ``tf.compat.v1.estimator`` (TF 1.x) shipped them: TF1's defaults and arguments.

TF 2 changed two defaults of the canned estimators, and TF1 scripts were
tuned against the old ones:

==========================  =========================  ==========================
                            TF1 (here)                 TF 2 (``toolkit.estimator``)
==========================  =========================  ==========================
``loss_reduction``          ``SUM`` ('weighted_sum')   ``SUM_OVER_BATCH_SIZE``
DNN optimizer by name       learning rate 0.05         the name's Keras default
                                                       (Adagrad 0.001)
partitioner arguments       ``input_layer_partitioner``  none
                            / ``partitioner``
==========================  =========================  ==========================

Linear (0.2) and combined (0.001, ``min(0.005, 1/sqrt(n))``) learning rates
are the same in both. Heads, metrics, prediction keys and exports are shared.
Without an explicit partitioner no variable is partitioned (TF1 split hidden
layers over the ps tasks once a slice passed 256 KiB; pass
``input_layer_partitioner=tf.compat.v1.min_max_variable_partitioner(...)``
to split the input layer).

Example:
    >>> from toolkit.estimator.canned import v1   # doctest: +SKIP
    >>> est = v1.DNNClassifier(hidden_units=[10, 20, 10], feature_columns=columns, n_classes=3)  # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned import dnn, dnn_linear_combined, linear
from toolkit.estimator.canned.heads import classifier_head, regressor_head

__all__ = [
    "DNNClassifier",
    "DNNLinearCombinedClassifier",
    "DNNLinearCombinedRegressor",
    "DNNRegressor",
    "LinearClassifier",
    "LinearRegressor",
]

_SUM = "weighted_sum"
_DNN_LEARNING_RATE = 0.05  # TF1's canned DNN, for an optimizer given by name


class DNNClassifier(dnn.DNNClassifier):
    """``tf.compat.v1.estimator.DNNClassifier``: TF1's signature and defaults."""

    def __init__(self, hidden_units: Iterable[int], feature_columns: Iterable[Any],
                 model_dir: str | os.PathLike | None = None, n_classes: int = 2, weight_column: Any = None,
                 label_vocabulary: Iterable[str] | None = None, optimizer: Any = "Adagrad",
                 activation_fn: Callable[..., Any] = tf.nn.relu, dropout: float | None = None,
                 input_layer_partitioner: Any = None, config: Any = None, warm_start_from: Any = None,
                 loss_reduction: Any = _SUM, batch_norm: bool = False) -> None:
        dnn._dnn_estimator(self, classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction),
                           hidden_units=hidden_units, feature_columns=feature_columns, optimizer=optimizer,
                           activation_fn=activation_fn, dropout=dropout, batch_norm=batch_norm, model_dir=model_dir,
                           config=config, warm_start_from=warm_start_from, name_learning_rate=_DNN_LEARNING_RATE,
                           input_layer_partitioner=input_layer_partitioner)


class DNNRegressor(dnn.DNNRegressor):
    """``tf.compat.v1.estimator.DNNRegressor``: TF1's signature and defaults."""

    def __init__(self, hidden_units: Iterable[int], feature_columns: Iterable[Any],
                 model_dir: str | os.PathLike | None = None, label_dimension: int = 1, weight_column: Any = None,
                 optimizer: Any = "Adagrad", activation_fn: Callable[..., Any] = tf.nn.relu,
                 dropout: float | None = None, input_layer_partitioner: Any = None, config: Any = None,
                 warm_start_from: Any = None, loss_reduction: Any = _SUM, batch_norm: bool = False) -> None:
        dnn._dnn_estimator(self, regressor_head(label_dimension, weight_column, loss_reduction),
                           hidden_units=hidden_units, feature_columns=feature_columns, optimizer=optimizer,
                           activation_fn=activation_fn, dropout=dropout, batch_norm=batch_norm, model_dir=model_dir,
                           config=config, warm_start_from=warm_start_from, name_learning_rate=_DNN_LEARNING_RATE,
                           input_layer_partitioner=input_layer_partitioner)


class LinearClassifier(linear.LinearClassifier):
    """``tf.compat.v1.estimator.LinearClassifier``: TF1's signature and defaults."""

    def __init__(self, feature_columns: Iterable[Any], model_dir: str | os.PathLike | None = None,
                 n_classes: int = 2, weight_column: Any = None, label_vocabulary: Iterable[str] | None = None,
                 optimizer: Any = "Ftrl", config: Any = None, partitioner: Any = None, warm_start_from: Any = None,
                 loss_reduction: Any = _SUM, sparse_combiner: str = "sum") -> None:
        linear._linear_estimator(self, classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction),
                                 feature_columns=feature_columns, optimizer=optimizer, sparse_combiner=sparse_combiner,
                                 model_dir=model_dir, config=config, warm_start_from=warm_start_from,
                                 partitioner=partitioner)


class LinearRegressor(linear.LinearRegressor):
    """``tf.compat.v1.estimator.LinearRegressor``: TF1's signature and defaults."""

    def __init__(self, feature_columns: Iterable[Any], model_dir: str | os.PathLike | None = None,
                 label_dimension: int = 1, weight_column: Any = None, optimizer: Any = "Ftrl", config: Any = None,
                 partitioner: Any = None, warm_start_from: Any = None, loss_reduction: Any = _SUM,
                 sparse_combiner: str = "sum") -> None:
        linear._linear_estimator(self, regressor_head(label_dimension, weight_column, loss_reduction),
                                 feature_columns=feature_columns, optimizer=optimizer, sparse_combiner=sparse_combiner,
                                 model_dir=model_dir, config=config, warm_start_from=warm_start_from,
                                 partitioner=partitioner)


class DNNLinearCombinedClassifier(dnn_linear_combined.DNNLinearCombinedClassifier):
    """``tf.compat.v1.estimator.DNNLinearCombinedClassifier``: TF1's signature and defaults."""

    def __init__(self, model_dir: str | os.PathLike | None = None, linear_feature_columns: Iterable[Any] = (),
                 linear_optimizer: Any = "Ftrl", dnn_feature_columns: Iterable[Any] = (),
                 dnn_optimizer: Any = "Adagrad", dnn_hidden_units: Iterable[int] | None = None,
                 dnn_activation_fn: Callable[..., Any] = tf.nn.relu, dnn_dropout: float | None = None,
                 n_classes: int = 2, weight_column: Any = None, label_vocabulary: Iterable[str] | None = None,
                 input_layer_partitioner: Any = None, config: Any = None, warm_start_from: Any = None,
                 loss_reduction: Any = _SUM, batch_norm: bool = False, linear_sparse_combiner: str = "sum") -> None:
        dnn_linear_combined._combined_estimator(
            self, classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction),
            linear_feature_columns=linear_feature_columns, linear_optimizer=linear_optimizer,
            dnn_feature_columns=dnn_feature_columns, dnn_optimizer=dnn_optimizer, dnn_hidden_units=dnn_hidden_units,
            dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout, batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner, model_dir=model_dir, config=config,
            warm_start_from=warm_start_from, input_layer_partitioner=input_layer_partitioner)


class DNNLinearCombinedRegressor(dnn_linear_combined.DNNLinearCombinedRegressor):
    """``tf.compat.v1.estimator.DNNLinearCombinedRegressor``: TF1's signature and defaults."""

    def __init__(self, model_dir: str | os.PathLike | None = None, linear_feature_columns: Iterable[Any] = (),
                 linear_optimizer: Any = "Ftrl", dnn_feature_columns: Iterable[Any] = (),
                 dnn_optimizer: Any = "Adagrad", dnn_hidden_units: Iterable[int] | None = None,
                 dnn_activation_fn: Callable[..., Any] = tf.nn.relu, dnn_dropout: float | None = None,
                 label_dimension: int = 1, weight_column: Any = None, input_layer_partitioner: Any = None,
                 config: Any = None, warm_start_from: Any = None, loss_reduction: Any = _SUM,
                 batch_norm: bool = False, linear_sparse_combiner: str = "sum") -> None:
        dnn_linear_combined._combined_estimator(
            self, regressor_head(label_dimension, weight_column, loss_reduction),
            linear_feature_columns=linear_feature_columns, linear_optimizer=linear_optimizer,
            dnn_feature_columns=dnn_feature_columns, dnn_optimizer=dnn_optimizer, dnn_hidden_units=dnn_hidden_units,
            dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout, batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner, model_dir=model_dir, config=config,
            warm_start_from=warm_start_from, input_layer_partitioner=input_layer_partitioner)
