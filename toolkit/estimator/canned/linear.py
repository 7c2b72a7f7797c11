"""``LinearClassifier`` and ``LinearRegressor``: TF 2's canned linear estimators on the graph engine.

Example:
    >>> city = tf.feature_column.categorical_column_with_vocabulary_list("city", ["a", "b"])  # doctest: +SKIP
    >>> est = LinearClassifier([city, tf.feature_column.numeric_column("age")])   # doctest: +SKIP
    >>> est.train(train_input_fn, max_steps=500)  # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from toolkit.estimator import Estimator
from toolkit.estimator.canned import _args
from toolkit.estimator.canned._model_fns import linear_model_fn
from toolkit.estimator.canned.heads import classifier_head, regressor_head
from toolkit.estimator.canned.optimizers import check_optimizer
from toolkit.estimator.canned.sdca import LinearSDCA, check_sdca

__all__ = ["LinearClassifier", "LinearRegressor"]


def _linear_estimator(self: Estimator, head: Any, *, feature_columns: Any, optimizer: Any, sparse_combiner: Any,
                      model_dir: Any, config: Any, warm_start_from: Any, partitioner: Any = None) -> None:
    columns = _args.check_feature_columns("feature_columns", feature_columns, dense=False)
    combiner = _args.check_sparse_combiner("sparse_combiner", sparse_combiner)
    if isinstance(optimizer, LinearSDCA):
        check_sdca(head, columns, combiner, partitioner)
    else:
        optimizer = check_optimizer("optimizer", optimizer)

    def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        del config  # TF 2's canned estimators do not partition variables
        return linear_model_fn(features, labels, mode, head=head, feature_columns=columns, optimizer=optimizer,
                               sparse_combiner=combiner, partitioner=partitioner)

    Estimator.__init__(self, _model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)
    self.head = head


class LinearClassifier(Estimator):
    """A linear classifier over feature columns (``tf.estimator.LinearClassifier``).

    Args:
        feature_columns: any feature columns; categorical ones get one weight
            per bucket.
        model_dir, n_classes, weight_column, label_vocabulary, config,
            warm_start_from, loss_reduction: as for ``DNNClassifier``.
        optimizer: a name (learning rate 0.2, TF's), a
            ``tf.compat.v1.train.Optimizer``, or a function returning one.
            Default 'Ftrl'. An ``experimental.LinearSDCA`` trains by SDCA
            (two classes only).
        sparse_combiner: 'sum' (default), 'mean' or 'sqrtn': how the weights
            of a multivalent categorical feature combine.
    """

    def __init__(self, feature_columns: Iterable[Any], model_dir: str | os.PathLike | None = None, *,
                 n_classes: int = 2, weight_column: Any = None, label_vocabulary: Iterable[str] | None = None,
                 optimizer: Any = "Ftrl", config: Any = None, warm_start_from: Any = None,
                 loss_reduction: Any = "sum_over_batch_size", sparse_combiner: str = "sum") -> None:
        head = classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction)
        _linear_estimator(self, head, feature_columns=feature_columns, optimizer=optimizer,
                          sparse_combiner=sparse_combiner, model_dir=model_dir, config=config,
                          warm_start_from=warm_start_from)


class LinearRegressor(Estimator):
    """A linear regressor over feature columns (``tf.estimator.LinearRegressor``).

    Args are ``LinearClassifier``'s, with ``label_dimension`` (default 1)
    instead of ``n_classes`` and ``label_vocabulary``.
    """

    def __init__(self, feature_columns: Iterable[Any], model_dir: str | os.PathLike | None = None, *,
                 label_dimension: int = 1, weight_column: Any = None, optimizer: Any = "Ftrl", config: Any = None,
                 warm_start_from: Any = None, loss_reduction: Any = "sum_over_batch_size",
                 sparse_combiner: str = "sum") -> None:
        head = regressor_head(label_dimension, weight_column, loss_reduction)
        _linear_estimator(self, head, feature_columns=feature_columns, optimizer=optimizer,
                          sparse_combiner=sparse_combiner, model_dir=model_dir, config=config,
                          warm_start_from=warm_start_from)
