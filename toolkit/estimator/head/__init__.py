"""TF 2's public heads (``tf.estimator.BinaryClassHead`` & co.): logits in, loss, metrics, predictions out.

A head works eagerly (``head.loss(labels, logits)``, ``head.metrics()`` /
``head.update_metrics(...)``) and inside a model_fn
(``head.create_estimator_spec(features=..., mode=..., logits=..., labels=...,
train_op_fn=...)``); ``DNNEstimator``, ``LinearEstimator`` and
``DNNLinearCombinedEstimator`` take one as their ``head``. Also at the top of
``toolkit.estimator``.
"""
from __future__ import annotations

from tf_config.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Head": "toolkit.estimator.head.base",
    "HeadError": "toolkit.estimator.head._checks",
    "BinaryClassHead": "toolkit.estimator.head.classification",
    "MultiClassHead": "toolkit.estimator.head.classification",
    "RegressionHead": "toolkit.estimator.head.regression",
    "PoissonRegressionHead": "toolkit.estimator.head.regression",
    "LogisticRegressionHead": "toolkit.estimator.head.regression",
    "MultiLabelHead": "toolkit.estimator.head.multi_label",
    "MultiHead": "toolkit.estimator.head.multi_head",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
