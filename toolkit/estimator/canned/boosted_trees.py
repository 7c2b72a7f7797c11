"""``BoostedTreesClassifier``, ``BoostedTreesRegressor``, ``BoostedTreesEstimator``: gradient-boosted trees.

The constructors take the arguments of ``tf.estimator``'s boosted trees (last
shipped in tensorflow-estimator 2.8): ``feature_columns`` (numeric, bucketized
and indicator columns), ``n_batches_per_layer`` (batches of gradient statistics
per tree layer), ``n_trees``, ``max_depth``, ``learning_rate``,
``l1_regularization``, ``l2_regularization``, ``tree_complexity``,
``min_node_weight``, ``center_bias``, ``pruning_mode`` (``none``/``pre``/``post``),
``quantile_sketch_epsilon`` and ``train_in_memory`` (the whole data set as one
batch, one layer per step). TensorFlow 2.21 declares the ``BoostedTrees*`` ops
but ships no kernel for them, so the trees are grown with ordinary TF ops
(``_bt_model_fn``, ``_bt_trees``) on upstream's schedule. Training stops by
itself once ``n_trees`` trees are grown. ``experimental_feature_importances``
and ``experimental_predict_with_explanations`` read the trained ensemble.

Example:
    >>> est = BoostedTreesClassifier([tf.feature_column.numeric_column("x", (4,))],
    ...                              n_batches_per_layer=1, n_trees=20)   # doctest: +SKIP
    >>> est.train(input_fn, max_steps=200)                                 # doctest: +SKIP
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator import Estimator
from toolkit.estimator.canned import _args
from toolkit.estimator.canned import _bt_explain as explain
from toolkit.estimator.canned import _bt_features as features_lib
from toolkit.estimator.canned._bt_model_fn import PATH_DELTAS, PATH_FEATURES, explanations_model_fn, model_fn
from toolkit.estimator.canned._bt_trees import TreeParams
from toolkit.estimator.canned._errors import CannedError

__all__ = ["BoostedTreesClassifier", "BoostedTreesEstimator", "BoostedTreesRegressor"]

v1 = tf.compat.v1


def _params(n_trees: Any, max_depth: Any, learning_rate: Any, l1: Any, l2: Any, tree_complexity: Any,
            min_node_weight: Any, center_bias: Any, pruning_mode: Any, epsilon: Any) -> TreeParams:
    """Upstream's checks, with the argument named."""
    fields = {"n_trees": n_trees, "max_depth": max_depth, "learning_rate": learning_rate,
              "quantile_sketch_epsilon": epsilon}
    for field, value in fields.items():
        if value <= 0:
            raise CannedError(f"`{field}` is {value!r}; Expected {field} > 0, received: {value}.", field=field)
    fields = {"l1_regularization": l1, "l2_regularization": l2, "tree_complexity": tree_complexity,
              "min_node_weight": min_node_weight}
    for field, value in fields.items():
        if value < 0:
            raise CannedError(f"`{field}` is {value!r}; Expected {field} >= 0, received: {value}.", field=field)
    if pruning_mode not in ("none", "pre", "post"):
        raise CannedError(f"`pruning_mode` is {pruning_mode!r}; expected one of 'none', 'pre', 'post'.",
                          field="pruning_mode")
    if pruning_mode == "none" and tree_complexity > 0:
        raise CannedError(f"`tree_complexity` is {tree_complexity}: Tree complexity have no effect unless pruning "
                          "mode is chosen. Set pruning_mode='pre' or 'post', or tree_complexity=0.",
                          field="tree_complexity")
    if pruning_mode != "none" and tree_complexity <= 0:
        raise CannedError(f"`pruning_mode` is {pruning_mode!r}: For pruning, tree_complexity must be positive. "
                          "Set tree_complexity > 0.", field="tree_complexity")
    return TreeParams(int(n_trees), int(max_depth), float(learning_rate), float(l1), float(l2),
                      float(tree_complexity), float(min_node_weight), bool(center_bias), pruning_mode, float(epsilon))


def _maxent_loss(n_classes: int) -> Any:
    """Softmax cross-entropy written out, so its hessian exists (TF's fused kernel has no second derivative)."""
    def loss_fn(labels: Any, logits: Any) -> Any:
        one_hot = tf.one_hot(tf.reshape(tf.cast(labels, tf.int64), [-1]), depth=n_classes)
        probabilities = tf.exp(logits) / (tf.reduce_sum(tf.exp(logits), 1, keepdims=True) + 1e-15)
        real = tf.clip_by_value(tf.reduce_sum(one_hot * probabilities, 1), 1e-15, 1 - 1e-15)
        return tf.expand_dims(-tf.math.log(real), 1)
    return loss_fn


class _BoostedTrees(Estimator):
    """What the three estimators share: the model_fn wiring and the two ``experimental_`` readers."""

    def _setup(self, *, head: Any, feature_columns: Any, n_batches_per_layer: Any, params: TreeParams,
               model_dir: Any, config: Any, train_in_memory: bool = False, is_classification: bool) -> None:
        columns = features_lib.check_columns(_args.check_feature_columns("feature_columns", feature_columns,
                                                                         dense=False))
        if train_in_memory and n_batches_per_layer != 1:
            raise CannedError(f"`n_batches_per_layer` is {n_batches_per_layer!r}: When train_in_memory is enabled, "
                              "input_fn should return the entire dataset as a single batch, and n_batches_per_layer "
                              "should be set as 1.", field="n_batches_per_layer")
        if not isinstance(n_batches_per_layer, (int, float)) or n_batches_per_layer <= 0:
            raise CannedError(f"`n_batches_per_layer` is {n_batches_per_layer!r}; expected a positive number of "
                              "batches per tree layer, e.g. half the data set: 0.5 * NUM_EXAMPLES / BATCH_SIZE.",
                              field="n_batches_per_layer")

        def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
            if train_in_memory and (config.num_worker_replicas > 1 or config.num_ps_replicas > 0):
                raise CannedError("train_in_memory is supported only for non-distributed training; this task is "
                                  f"in a cluster ({config.num_worker_replicas} workers, {config.num_ps_replicas} "
                                  "ps). Set train_in_memory=False.", field="train_in_memory")
            return model_fn(features, labels, mode, head=head, columns=columns, params=params,
                            n_batches_per_layer=float(n_batches_per_layer))

        Estimator.__init__(self, _model_fn, model_dir=model_dir, config=config)
        self._bt_head, self._bt_columns, self._bt_params = head, columns, params
        self._bt_layout = features_lib.layout(columns, int(1.0 / params.quantile_sketch_epsilon))
        self._bt_classification = is_classification

    def experimental_feature_importances(self, normalize: bool = False) -> Any:
        """Gain-based importances ``OrderedDict({column name: importance})``, most important first."""
        if self.latest_checkpoint() is None:
            raise ValueError("Found no trained TreeEnsemble. You should only call this method after training.")
        values = explain.importances(self.get_variable_value("boosted_trees/node_feature"),
                                     self._bt_layout.n_features, self.get_variable_value("boosted_trees/node_gain"))
        if normalize:
            if (values < 0).any():
                raise ValueError("feature_importances must be non-negative; normalize=False shows them.")
            if values.sum() <= 0:
                raise ValueError("Trees are all empty or contain only a root node: nothing to normalize.")
            values = values / values.sum()
        return explain.sum_by_name(self._bt_layout.names, values)

    def experimental_predict_with_explanations(self, input_fn: Any, predict_keys: Sequence[str] | None = None,
                                               hooks: Any = None, checkpoint_path: str | None = None) -> Iterator[Any]:
        """``predict``'s dicts plus ``bias`` and ``dfc`` (each column's directional feature contribution)."""
        if not self._bt_params.center_bias:
            raise ValueError("center_bias must be enabled during estimator instantiation when using "
                             "experimental_predict_with_explanations.")
        if self._bt_head.logits_dimension > 1:
            raise ValueError("experimental_predict_with_explanations does not yet support multi-class "
                             "classification and multi-label regression.")
        fn = functools.partial(explanations_model_fn, head=self._bt_head, columns=self._bt_columns,
                               params=self._bt_params)
        explainer = Estimator(lambda features, labels, mode: fn(features), model_dir=self.model_dir,
                              config=self.config)
        keys = None if predict_keys is None else sorted({*predict_keys, PATH_FEATURES, PATH_DELTAS})
        bias = float(self.get_variable_value("boosted_trees/bias")[0]) if self.latest_checkpoint() else 0.0
        for prediction in explainer.predict(input_fn, predict_keys=keys, hooks=hooks,
                                            checkpoint_path=checkpoint_path, yield_single_examples=True):
            base, dfc = explain.contributions(bias, prediction.pop(PATH_FEATURES), prediction.pop(PATH_DELTAS),
                                              self._bt_layout.names, self._bt_classification)
            prediction["bias"], prediction["dfc"] = base, dfc
            yield prediction


class BoostedTreesClassifier(_BoostedTrees):
    """A classifier of boosted trees (``tf.estimator.BoostedTreesClassifier``).

    ``n_classes`` > 2 uses a softmax head with a full hessian (and no ``center_bias``).
    """

    def __init__(self, feature_columns: Any, n_batches_per_layer: Any, model_dir: str | os.PathLike | None = None,
                 n_classes: int = 2, weight_column: Any = None, label_vocabulary: Sequence[str] | None = None,
                 n_trees: int = 100, max_depth: int = 6, learning_rate: float = 0.1,
                 l1_regularization: float = 0.0, l2_regularization: float = 0.0, tree_complexity: float = 0.0,
                 min_node_weight: float = 0.0, config: Any = None, center_bias: bool = False,
                 pruning_mode: str = "none", quantile_sketch_epsilon: float = 0.01,
                 train_in_memory: bool = False) -> None:
        from toolkit.estimator.head import BinaryClassHead, MultiClassHead
        n_classes = _args.check_n_classes(n_classes)
        if n_classes > 2 and center_bias:
            raise CannedError(f"`center_bias` is True with n_classes={n_classes}: center_bias not yet support with "
                              "n_classes > 2. Set center_bias=False.", field="center_bias")
        vocabulary = _args.check_label_vocabulary(label_vocabulary, n_classes)
        weight = _args.check_weight_column(weight_column)
        head: Any
        if n_classes == 2:
            head = BinaryClassHead(weight_column=weight, label_vocabulary=vocabulary)
        else:
            head = MultiClassHead(n_classes, weight_column=weight, label_vocabulary=vocabulary,
                                  loss_fn=_maxent_loss(n_classes))
        params = _params(n_trees, max_depth, learning_rate, l1_regularization, l2_regularization, tree_complexity,
                         min_node_weight, center_bias, pruning_mode, quantile_sketch_epsilon)
        self._setup(head=head, feature_columns=feature_columns, n_batches_per_layer=n_batches_per_layer,
                    params=params, model_dir=model_dir, config=config, train_in_memory=train_in_memory,
                    is_classification=True)


class BoostedTreesRegressor(_BoostedTrees):
    """A regressor of boosted trees (``tf.estimator.BoostedTreesRegressor``)."""

    def __init__(self, feature_columns: Any, n_batches_per_layer: Any, model_dir: str | os.PathLike | None = None,
                 label_dimension: int = 1, weight_column: Any = None, n_trees: int = 100, max_depth: int = 6,
                 learning_rate: float = 0.1, l1_regularization: float = 0.0, l2_regularization: float = 0.0,
                 tree_complexity: float = 0.0, min_node_weight: float = 0.0, config: Any = None,
                 center_bias: bool = False, pruning_mode: str = "none", quantile_sketch_epsilon: float = 0.01,
                 train_in_memory: bool = False) -> None:
        from toolkit.estimator.head import RegressionHead
        weight = _args.check_weight_column(weight_column)
        head = RegressionHead(label_dimension=_args.check_label_dimension(label_dimension), weight_column=weight)
        params = _params(n_trees, max_depth, learning_rate, l1_regularization, l2_regularization, tree_complexity,
                         min_node_weight, center_bias, pruning_mode, quantile_sketch_epsilon)
        self._setup(head=head, feature_columns=feature_columns, n_batches_per_layer=n_batches_per_layer,
                    params=params, model_dir=model_dir, config=config, train_in_memory=train_in_memory,
                    is_classification=False)


class BoostedTreesEstimator(_BoostedTrees):
    """Boosted trees under any ``head`` (``tf.estimator.BoostedTreesEstimator``); no ``train_in_memory``."""

    def __init__(self, feature_columns: Any, n_batches_per_layer: Any, head: Any,
                 model_dir: str | os.PathLike | None = None, weight_column: Any = None, n_trees: int = 100,
                 max_depth: int = 6, learning_rate: float = 0.1, l1_regularization: float = 0.0,
                 l2_regularization: float = 0.0, tree_complexity: float = 0.0, min_node_weight: float = 0.0,
                 config: Any = None, center_bias: bool = False, pruning_mode: str = "none",
                 quantile_sketch_epsilon: float = 0.01) -> None:
        from toolkit.estimator.canned.head_based import check_head
        from toolkit.estimator.head import BinaryClassHead, MultiClassHead
        head = check_head(head)
        params = _params(n_trees, max_depth, learning_rate, l1_regularization, l2_regularization, tree_complexity,
                         min_node_weight, center_bias, pruning_mode, quantile_sketch_epsilon)
        self._setup(head=head, feature_columns=feature_columns, n_batches_per_layer=n_batches_per_layer,
                    params=params, model_dir=model_dir, config=config,
                    is_classification=isinstance(head, (BinaryClassHead, MultiClassHead)))
