"""``DNNClassifier`` and ``DNNRegressor``: TF 2's canned feed-forward estimators on the graph engine.

Example:
    >>> est = DNNClassifier(hidden_units=[32, 16], feature_columns=[tf.feature_column.numeric_column("x", (4,))],
    ...                     n_classes=3, model_dir="runs/dnn")   # doctest: +SKIP
    >>> est.train(train_input_fn, max_steps=1000)  # doctest: +SKIP
    >>> est.evaluate(eval_input_fn)["accuracy"]  # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from toolkit.estimator import Estimator
from toolkit.estimator.canned import _args
from toolkit.estimator.canned._model_fns import dnn_model_fn
from toolkit.estimator.canned.heads import classifier_head, regressor_head
from toolkit.estimator.canned.optimizers import check_optimizer

__all__ = ["DNNClassifier", "DNNRegressor"]


def _dnn_estimator(self: Estimator, head: Any, *, hidden_units: Any, feature_columns: Any, optimizer: Any,
                   activation_fn: Any, dropout: Any, batch_norm: bool, model_dir: Any, config: Any,
                   warm_start_from: Any, name_learning_rate: float | None = None,
                   input_layer_partitioner: Any = None) -> None:
    units = _args.check_hidden_units("hidden_units", hidden_units)
    columns = _args.check_feature_columns("feature_columns", feature_columns, dense=True)
    optimizer = check_optimizer("optimizer", optimizer)
    activation_fn = _args.check_activation("activation_fn", activation_fn)
    dropout = _args.check_dropout("dropout", dropout)

    def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        del config  # TF 2's canned estimators do not partition variables
        return dnn_model_fn(features, labels, mode, head=head, hidden_units=units, feature_columns=columns,
                            optimizer=optimizer, activation_fn=activation_fn, dropout=dropout,
                            batch_norm=bool(batch_norm), name_learning_rate=name_learning_rate,
                            input_layer_partitioner=input_layer_partitioner)

    Estimator.__init__(self, _model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)
    self.head = head


class DNNClassifier(Estimator):
    """A feed-forward classifier over feature columns (``tf.estimator.DNNClassifier``).

    Args:
        hidden_units: widths of the hidden layers, e.g. ``[64, 32]``.
        feature_columns: dense feature columns (wrap categorical ones in
            ``indicator_column`` / ``embedding_column``).
        model_dir: where checkpoints go (or ``config.model_dir``).
        n_classes: 2 (a sigmoid head) or more (a softmax head).
        weight_column: name of (or ``numeric_column`` for) per-example weights.
        label_vocabulary: the label strings, when labels are strings.
        optimizer: a name ('Adagrad', 'Adam', 'Ftrl', 'RMSProp', 'SGD': Keras'
            default learning rate), a ``tf.compat.v1.train.Optimizer``, or a
            function returning one. Default 'Adagrad' (learning rate 0.001).
        activation_fn: applied after each hidden layer (default ``tf.nn.relu``).
        dropout: probability of dropping a hidden unit while training.
        config: a ``RunConfig``.
        warm_start_from: a checkpoint path or ``WarmStartSettings``.
        loss_reduction: 'sum_over_batch_size' (default) or 'sum', or any
            ``tf.compat.v1.losses.Reduction``.
        batch_norm: batch-normalise after each hidden layer.
    """

    def __init__(self, hidden_units: Iterable[int], feature_columns: Iterable[Any],
                 model_dir: str | os.PathLike | None = None, *, n_classes: int = 2, weight_column: Any = None,
                 label_vocabulary: Iterable[str] | None = None, optimizer: Any = "Adagrad",
                 activation_fn: Callable[..., Any] = tf.nn.relu, dropout: float | None = None, config: Any = None,
                 warm_start_from: Any = None, loss_reduction: Any = "sum_over_batch_size",
                 batch_norm: bool = False) -> None:
        head = classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction)
        _dnn_estimator(self, head, hidden_units=hidden_units, feature_columns=feature_columns, optimizer=optimizer,
                       activation_fn=activation_fn, dropout=dropout, batch_norm=batch_norm, model_dir=model_dir,
                       config=config, warm_start_from=warm_start_from)


class DNNRegressor(Estimator):
    """A feed-forward regressor over feature columns (``tf.estimator.DNNRegressor``).

    Args are ``DNNClassifier``'s, with ``label_dimension`` (values per label,
    default 1) instead of ``n_classes`` and ``label_vocabulary``.
    """

    def __init__(self, hidden_units: Iterable[int], feature_columns: Iterable[Any],
                 model_dir: str | os.PathLike | None = None, *, label_dimension: int = 1, weight_column: Any = None,
                 optimizer: Any = "Adagrad", activation_fn: Callable[..., Any] = tf.nn.relu,
                 dropout: float | None = None, config: Any = None, warm_start_from: Any = None,
                 loss_reduction: Any = "sum_over_batch_size", batch_norm: bool = False) -> None:
        head = regressor_head(label_dimension, weight_column, loss_reduction)
        _dnn_estimator(self, head, hidden_units=hidden_units, feature_columns=feature_columns, optimizer=optimizer,
                       activation_fn=activation_fn, dropout=dropout, batch_norm=batch_norm, model_dir=model_dir,
                       config=config, warm_start_from=warm_start_from)
