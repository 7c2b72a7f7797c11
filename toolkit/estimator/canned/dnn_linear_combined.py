"""``DNNLinearCombinedClassifier`` / ``Regressor``: TF 2's wide & deep estimators on the graph engine.

The logits are the sum of a linear model over ``linear_feature_columns`` and
a DNN over ``dnn_feature_columns``; each half has its own optimizer (default
'Ftrl' at ``min(0.005, 1/sqrt(#linear columns))`` and 'Adagrad' at 0.001, TF's
defaults) and the global step advances once per batch.

Example:
    >>> est = DNNLinearCombinedClassifier(linear_feature_columns=[city], dnn_feature_columns=[age, city_emb],
    ...                                   dnn_hidden_units=[32, 16])   # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from toolkit.estimator import Estimator
from toolkit.estimator.canned import _args
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._model_fns import combined_model_fn, refuse_sync_replicas
from toolkit.estimator.canned.heads import classifier_head, regressor_head
from toolkit.estimator.canned.optimizers import check_optimizer

__all__ = ["DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor"]


def _combined_estimator(self: Estimator, head: Any, *, linear_feature_columns: Any, linear_optimizer: Any,
                        dnn_feature_columns: Any, dnn_optimizer: Any, dnn_hidden_units: Any,
                        dnn_activation_fn: Any, dnn_dropout: Any, batch_norm: bool, linear_sparse_combiner: Any,
                        model_dir: Any, config: Any, warm_start_from: Any,
                        input_layer_partitioner: Any = None) -> None:
    linear = _args.check_feature_columns("linear_feature_columns", linear_feature_columns, dense=False,
                                         required=False)
    dnn = _args.check_feature_columns("dnn_feature_columns", dnn_feature_columns, dense=True, required=False)
    if not linear and not dnn:
        raise CannedError("`linear_feature_columns` and `dnn_feature_columns` are both "
                          "empty; pass at least one list of feature columns (e.g. categorical columns to the "
                          "linear part, numeric and embedding columns to the DNN part).",
                          field="linear_feature_columns")
    units = _args.check_hidden_units("dnn_hidden_units", dnn_hidden_units) if dnn else None
    linear_optimizer = check_optimizer("linear_optimizer", linear_optimizer)
    dnn_optimizer = check_optimizer("dnn_optimizer", dnn_optimizer)
    refuse_sync_replicas("linear_optimizer", linear_optimizer)
    refuse_sync_replicas("dnn_optimizer", dnn_optimizer)
    activation = _args.check_activation("dnn_activation_fn", dnn_activation_fn)
    dropout = _args.check_dropout("dnn_dropout", dnn_dropout)
    combiner = _args.check_sparse_combiner("linear_sparse_combiner", linear_sparse_combiner)

    def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        del config  # TF 2's canned estimators do not partition variables
        return combined_model_fn(features, labels, mode, head=head, linear_feature_columns=linear,
                                 linear_optimizer=linear_optimizer, dnn_feature_columns=dnn,
                                 dnn_optimizer=dnn_optimizer, dnn_hidden_units=units, dnn_activation_fn=activation,
                                 dnn_dropout=dropout, batch_norm=bool(batch_norm), linear_sparse_combiner=combiner,
                                 input_layer_partitioner=input_layer_partitioner)

    Estimator.__init__(self, _model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)
    self.head = head


class DNNLinearCombinedClassifier(Estimator):
    """Wide & deep classification (``tf.estimator.DNNLinearCombinedClassifier``).

    Args:
        model_dir: where checkpoints go (or ``config.model_dir``).
        linear_feature_columns: columns of the linear ("wide") part.
        linear_optimizer: its optimizer (name, v1 optimizer or function); default 'Ftrl'.
        dnn_feature_columns: dense columns of the DNN ("deep") part.
        dnn_optimizer: its optimizer; default 'Adagrad'.
        dnn_hidden_units: hidden layer widths, required with dnn_feature_columns.
        dnn_activation_fn, dnn_dropout, batch_norm: as for ``DNNClassifier``.
        n_classes, weight_column, label_vocabulary, config, warm_start_from,
            loss_reduction: as for ``DNNClassifier``.
        linear_sparse_combiner: as ``LinearClassifier``'s ``sparse_combiner``.
    """

    def __init__(self, model_dir: str | os.PathLike | None = None, *, linear_feature_columns: Iterable[Any] = (),
                 linear_optimizer: Any = "Ftrl", dnn_feature_columns: Iterable[Any] = (),
                 dnn_optimizer: Any = "Adagrad", dnn_hidden_units: Iterable[int] | None = None,
                 dnn_activation_fn: Callable[..., Any] = tf.nn.relu, dnn_dropout: float | None = None,
                 n_classes: int = 2, weight_column: Any = None, label_vocabulary: Iterable[str] | None = None,
                 config: Any = None, warm_start_from: Any = None, loss_reduction: Any = "sum_over_batch_size",
                 batch_norm: bool = False, linear_sparse_combiner: str = "sum") -> None:
        head = classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction)
        _combined_estimator(self, head, linear_feature_columns=linear_feature_columns,
                            linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns,
                            dnn_optimizer=dnn_optimizer, dnn_hidden_units=dnn_hidden_units,
                            dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout, batch_norm=batch_norm,
                            linear_sparse_combiner=linear_sparse_combiner, model_dir=model_dir, config=config,
                            warm_start_from=warm_start_from)


class DNNLinearCombinedRegressor(Estimator):
    """Wide & deep regression (``tf.estimator.DNNLinearCombinedRegressor``).

    Args are ``DNNLinearCombinedClassifier``'s, with ``label_dimension``
    (default 1) instead of ``n_classes`` and ``label_vocabulary``.
    """

    def __init__(self, model_dir: str | os.PathLike | None = None, *, linear_feature_columns: Iterable[Any] = (),
                 linear_optimizer: Any = "Ftrl", dnn_feature_columns: Iterable[Any] = (),
                 dnn_optimizer: Any = "Adagrad", dnn_hidden_units: Iterable[int] | None = None,
                 dnn_activation_fn: Callable[..., Any] = tf.nn.relu, dnn_dropout: float | None = None,
                 label_dimension: int = 1, weight_column: Any = None, config: Any = None,
                 warm_start_from: Any = None, loss_reduction: Any = "sum_over_batch_size", batch_norm: bool = False,
                 linear_sparse_combiner: str = "sum") -> None:
        head = regressor_head(label_dimension, weight_column, loss_reduction)
        _combined_estimator(self, head, linear_feature_columns=linear_feature_columns,
                            linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns,
                            dnn_optimizer=dnn_optimizer, dnn_hidden_units=dnn_hidden_units,
                            dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout, batch_norm=batch_norm,
                            linear_sparse_combiner=linear_sparse_combiner, model_dir=model_dir, config=config,
                            warm_start_from=warm_start_from)
