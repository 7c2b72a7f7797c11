"""Canned estimators over feature columns, as ``tf.estimator`` shipped them, on the graph-mode engine.

``DNNClassifier``, ``DNNRegressor``, ``LinearClassifier``,
``LinearRegressor``, ``DNNLinearCombinedClassifier`` and
``DNNLinearCombinedRegressor`` take TF 2's constructor arguments and follow
its heads: the same losses and reductions, metrics (``accuracy``, ``auc``,
``precision``, ``recall``, ``average_loss``, ``accuracy_baseline``,
``label/mean``, ``prediction/mean``...), prediction keys (``class_ids``,
``classes``, ``probabilities``, ``logits``, ``logistic``, ``predictions``...)
and SavedModel signatures (``serving_default``, ``classification``,
``regression``, ``predict``). Code written for ``tf.estimator.DNNClassifier``
runs after replacing ``tf.estimator`` with ``toolkit.estimator``.

Example:
    >>> from toolkit.estimator.canned import DNNClassifier   # doctest: +SKIP
    >>> est = DNNClassifier(hidden_units=[16], feature_columns=[tf.feature_column.numeric_column("x", (64,))],
    ...                     n_classes=10, optimizer="Adam")  # doctest: +SKIP
"""
from __future__ import annotations

from tf_config.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "CannedError": "toolkit.estimator.canned._errors",
    "DNNClassifier": "toolkit.estimator.canned.dnn",
    "DNNRegressor": "toolkit.estimator.canned.dnn",
    "LinearClassifier": "toolkit.estimator.canned.linear",
    "LinearRegressor": "toolkit.estimator.canned.linear",
    "DNNLinearCombinedClassifier": "toolkit.estimator.canned.dnn_linear_combined",
    "DNNLinearCombinedRegressor": "toolkit.estimator.canned.dnn_linear_combined",
    "DNNEstimator": "toolkit.estimator.canned.head_based",
    "LinearEstimator": "toolkit.estimator.canned.head_based",
    "DNNLinearCombinedEstimator": "toolkit.estimator.canned.head_based",
    "BaselineClassifier": "toolkit.estimator.canned.baseline",
    "BaselineRegressor": "toolkit.estimator.canned.baseline",
    "BaselineEstimator": "toolkit.estimator.canned.baseline",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
