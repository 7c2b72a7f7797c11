"""``DNNEstimator``, ``LinearEstimator``, ``DNNLinearCombinedEstimator``: the canned networks over any head.

As in TF 2, these take a ``head`` (``toolkit.estimator.BinaryClassHead``,
``MultiLabelHead``, ``PoissonRegressionHead``, a ``MultiHead``, or your own
``Head`` subclass) instead of ``n_classes``/``label_dimension``: the network
makes ``head.logits_dimension`` logits and the head turns them into the loss,
metrics, predictions and export signatures.

Example:
    >>> est = DNNEstimator(head=toolkit.estimator.PoissonRegressionHead(), hidden_units=[16],
    ...                    feature_columns=[tf.feature_column.numeric_column("x")])   # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from toolkit.estimator import Estimator
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned.dnn import _dnn_estimator
from toolkit.estimator.canned.dnn_linear_combined import _combined_estimator
from toolkit.estimator.canned.linear import _linear_estimator

__all__ = ["DNNEstimator", "DNNLinearCombinedEstimator", "LinearEstimator", "check_head"]


def check_head(head: Any) -> Any:
    """A head has ``logits_dimension`` and ``create_estimator_spec``; anything else is refused now."""
    if not (hasattr(head, "logits_dimension") and callable(getattr(head, "create_estimator_spec", None))):
        raise CannedError(f"`head` is {type(head).__name__} {head!r}; expected a head such as "
                          "toolkit.estimator.BinaryClassHead() or a subclass of toolkit.estimator.Head.", field="head")
    return head


class DNNEstimator(Estimator):
    """A feed-forward network under ``head`` (``tf.estimator.DNNEstimator``).

    Args:
        head: the ``Head`` computing loss, metrics and predictions.
        hidden_units, feature_columns, model_dir, optimizer, activation_fn, dropout,
        config, warm_start_from, batch_norm: as for ``DNNClassifier``.
    """

    def __init__(self, head: Any, hidden_units: Iterable[int], feature_columns: Iterable[Any],
                 model_dir: str | os.PathLike | None = None, optimizer: Any = "Adagrad",
                 activation_fn: Callable[..., Any] = tf.nn.relu, dropout: float | None = None, config: Any = None,
                 warm_start_from: Any = None, batch_norm: bool = False) -> None:
        _dnn_estimator(self, check_head(head), hidden_units=hidden_units, feature_columns=feature_columns,
                       optimizer=optimizer, activation_fn=activation_fn, dropout=dropout, batch_norm=batch_norm,
                       model_dir=model_dir, config=config, warm_start_from=warm_start_from)


class LinearEstimator(Estimator):
    """A linear model under ``head`` (``tf.estimator.LinearEstimator``).

    Args:
        head: the ``Head`` computing loss, metrics and predictions.
        feature_columns, model_dir, optimizer, config, sparse_combiner, warm_start_from:
            as for ``LinearClassifier``.
    """

    def __init__(self, head: Any, feature_columns: Iterable[Any], model_dir: str | os.PathLike | None = None,
                 optimizer: Any = "Ftrl", config: Any = None, sparse_combiner: str = "sum",
                 warm_start_from: Any = None) -> None:
        _linear_estimator(self, check_head(head), feature_columns=feature_columns, optimizer=optimizer,
                          sparse_combiner=sparse_combiner, model_dir=model_dir, config=config,
                          warm_start_from=warm_start_from)


class DNNLinearCombinedEstimator(Estimator):
    """Wide & deep under ``head`` (``tf.estimator.DNNLinearCombinedEstimator``).

    Args:
        head: the ``Head`` computing loss, metrics and predictions.
        other arguments: as for ``DNNLinearCombinedClassifier``.
    """

    def __init__(self, head: Any, model_dir: str | os.PathLike | None = None,
                 linear_feature_columns: Iterable[Any] | None = None, linear_optimizer: Any = "Ftrl",
                 dnn_feature_columns: Iterable[Any] | None = None, dnn_optimizer: Any = "Adagrad",
                 dnn_hidden_units: Iterable[int] | None = None, dnn_activation_fn: Callable[..., Any] = tf.nn.relu,
                 dnn_dropout: float | None = None, config: Any = None, batch_norm: bool = False,
                 linear_sparse_combiner: str = "sum", warm_start_from: Any = None) -> None:
        _combined_estimator(self, check_head(head), linear_feature_columns=linear_feature_columns,
                            linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns,
                            dnn_optimizer=dnn_optimizer, dnn_hidden_units=dnn_hidden_units,
                            dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout, batch_norm=batch_norm,
                            linear_sparse_combiner=linear_sparse_combiner, model_dir=model_dir, config=config,
                            warm_start_from=warm_start_from)
