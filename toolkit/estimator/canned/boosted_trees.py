"""``BoostedTreesClassifier``, ``BoostedTreesRegressor``, ``BoostedTreesEstimator``: refused, with the reason.

tf.estimator's boosted trees ran on TensorFlow's ``BoostedTrees*`` kernels.
TensorFlow 2.21 still declares those 27 ops (``tf.raw_ops.BoostedTrees*``), but
its wheel registers no kernel for any of them: the first op that runs fails
with "No OpKernel was registered to support Op 'BoostedTreesEnsembleResourceHandleOp'".
(tensorflow/estimator itself dropped these estimators in 2.9, pointing to
TensorFlow Decision Forests.) So the names exist, take tf.estimator's
arguments, and raise ``CannedError`` naming the cause and the alternatives,
instead of an ``AttributeError`` or a kernel error deep inside ``train``.

``kernels_available()`` says whether the installed TensorFlow has the kernels
(a unit test watches it, so a TensorFlow that brings them back is noticed).
"""
from __future__ import annotations

from typing import Any

from toolkit.estimator.canned._errors import CannedError

__all__ = ["BoostedTreesClassifier", "BoostedTreesEstimator", "BoostedTreesRegressor", "kernels_available"]

_PROBE_OP = "BoostedTreesEnsembleResourceHandleOp"


def kernels_available() -> bool:
    """Whether this TensorFlow can run the ops boosted trees are built on."""
    import tensorflow as tf

    try:
        tf.raw_ops.BoostedTreesEnsembleResourceHandleOp(container="", shared_name="tfdist_probe")
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
        return False
    return True


def _refuse(name: str) -> None:
    raise CannedError(
        f"{name} needs TensorFlow's BoostedTrees* kernels, and this TensorFlow has none registered (TF 2.21 declares "
        f"the ops in tf.raw_ops but its wheel ships no kernel for them: '{_PROBE_OP}' finds no OpKernel). "
        "Train gradient-boosted trees with TensorFlow Decision Forests (tensorflow_decision_forests) or another "
        "GBDT library outside the Estimator, or use DNNClassifier/LinearClassifier/DNNLinearCombinedClassifier "
        "(or their Regressor twins) here.", field="estimator")


class BoostedTreesClassifier:
    """``tf.estimator.BoostedTreesClassifier``'s signature; raises ``CannedError`` (no kernels in TF 2.21)."""

    def __init__(self, feature_columns: Any, n_batches_per_layer: Any, model_dir: Any = None, n_classes: int = 2,
                 weight_column: Any = None, label_vocabulary: Any = None, n_trees: int = 100, max_depth: int = 6,
                 learning_rate: float = 0.1, l1_regularization: float = 0.0, l2_regularization: float = 0.0,
                 tree_complexity: float = 0.0, min_node_weight: float = 0.0, config: Any = None,
                 center_bias: bool = False, pruning_mode: str = "none", quantile_sketch_epsilon: float = 0.01,
                 train_in_memory: bool = False) -> None:
        _refuse(type(self).__name__)


class BoostedTreesRegressor:
    """``tf.estimator.BoostedTreesRegressor``'s signature; raises ``CannedError`` (no kernels in TF 2.21)."""

    def __init__(self, feature_columns: Any, n_batches_per_layer: Any, model_dir: Any = None,
                 label_dimension: int = 1, weight_column: Any = None, n_trees: int = 100, max_depth: int = 6,
                 learning_rate: float = 0.1, l1_regularization: float = 0.0, l2_regularization: float = 0.0,
                 tree_complexity: float = 0.0, min_node_weight: float = 0.0, config: Any = None,
                 center_bias: bool = False, pruning_mode: str = "none", quantile_sketch_epsilon: float = 0.01,
                 train_in_memory: bool = False) -> None:
        _refuse(type(self).__name__)


class BoostedTreesEstimator:
    """``tf.estimator.BoostedTreesEstimator``'s signature; raises ``CannedError`` (no kernels in TF 2.21)."""

    def __init__(self, feature_columns: Any, n_batches_per_layer: Any, head: Any, model_dir: Any = None,
                 weight_column: Any = None, n_trees: int = 100, max_depth: int = 6, learning_rate: float = 0.1,
                 l1_regularization: float = 0.0, l2_regularization: float = 0.0, tree_complexity: float = 0.0,
                 min_node_weight: float = 0.0, config: Any = None, center_bias: bool = False,
                 pruning_mode: str = "none", quantile_sketch_epsilon: float = 0.01) -> None:
        _refuse(type(self).__name__)
