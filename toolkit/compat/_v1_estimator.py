"""``tf.estimator`` as ``tf.compat.v1.estimator`` had it, for ``import toolkit.compat.v1 as tf``.

The engine is ``toolkit.estimator``'s; only the canned estimators differ: TF1
scripts get ``toolkit.estimator.canned.v1``'s classes, with TF1's signatures and
defaults (loss reduction SUM, a DNN optimizer named by string at learning rate
0.05, partitioner arguments), as ``tf.compat.v1.estimator`` served them. Code
written for TF 2's ``tf.estimator`` imports ``toolkit.estimator`` instead and gets
TF 2's defaults.
"""
from __future__ import annotations

import importlib
from typing import Any

from toolkit.estimator import __all__ as _ENGINE_NAMES

_CANNED_V1 = frozenset(("DNNClassifier", "DNNRegressor", "LinearClassifier", "LinearRegressor",
                        "DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor"))

__all__ = sorted(_ENGINE_NAMES)


#: TF1-only names and TF1 variants of engine classes: {public name: (module, attribute)}
_V1_ONLY = {
    "Estimator": ("toolkit.estimator.estimator", "EstimatorV1"),
}


def __getattr__(name: str) -> Any:
    default = ("toolkit.estimator.canned.v1" if name in _CANNED_V1 else "toolkit.estimator", name)
    module, attribute = _V1_ONLY.get(name, default)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
