"""Feature importances and directional feature contributions (DFCs), in NumPy, as upstream computed them.

* Importance of a feature: the sum of the gains of the splits on it, over every
  tree (all trees weigh 1), summed per column and sorted by absolute value.
* DFCs of one example: walk its path (bias, then each split step of each tree);
  each step's change of prediction (a probability for classifiers: the sigmoid
  of the running logits) is credited to the feature split on.
"""
from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["contributions", "importances", "sum_by_name"]


def importances(node_feature: Any, n_features: int, node_gain: Any) -> np.ndarray:
    """``[n_features]``: the summed gain of each feature id's splits."""
    feature, gain = np.asarray(node_feature).ravel(), np.asarray(node_gain).ravel()
    split = feature >= 0
    return np.bincount(feature[split], weights=gain[split], minlength=n_features).astype(np.float64)


def sum_by_name(names: Sequence[str], values: Any) -> collections.OrderedDict[str, float]:
    """Sums the values of the feature ids of one column; sorted by absolute value, largest first."""
    sums: dict[str, float] = {}
    for name, value in zip(names, values, strict=True):
        sums[name] = sums.get(name, 0.0) + float(value)
    return collections.OrderedDict(sorted(sums.items(), key=lambda item: abs(item[1]), reverse=True))


def contributions(bias: float, path_features: Any, path_deltas: Any, names: Sequence[str],
                  classification: bool) -> tuple[float, collections.OrderedDict[str, float]]:
    """``(bias, dfc)`` of one example from the features split on along its path and each step's logit change."""
    features = np.asarray(path_features).ravel()
    steps = features >= 0
    logits = bias + np.concatenate([[0.0], np.cumsum(np.asarray(path_deltas, dtype=np.float64).ravel()[steps])])
    predictions = 1.0 / (1.0 + np.exp(-logits)) if classification else logits
    per_feature = np.bincount(features[steps], weights=np.diff(predictions), minlength=len(names))
    return float(predictions[0]), sum_by_name(names, per_feature)
