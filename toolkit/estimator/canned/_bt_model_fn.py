"""The boosted-trees ``model_fn``: upstream's training schedule, one graph step at a time.

Every step reads the ensemble, predicts (bias + each tree's value at the node the
example reaches), and takes the loss's gradients and hessians with respect to
the logits. What the step then does depends on the phase the variables record:

1. **quantiles** (while numeric columns have no boundaries): each batch's
   quantiles are summed; after ``n_batches_per_layer`` batches their mean
   becomes the boundaries (``1 / quantile_sketch_epsilon`` buckets);
2. **bias** (``center_bias``): the batches' gradient and hessian sums move the
   bias by Newton steps until a step moves it by less than 0.01;
3. **grow**: the statistics per node of the layer being grown, feature and
   bucket, are summed over ``n_batches_per_layer`` batches (their mean is what
   the split sees); then each node of the layer takes its best split (if it
   gains), and the layer is done. A tree is finished after ``max_depth``
   layers; training stops by itself once ``n_trees`` trees are finished.

The phases are predicates, not branches: each step computes every candidate
update and assigns the one its phase selects, so the graph has no control flow.
As upstream, the global step counts the bias and grow steps, not the quantile ones.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned import _bt_features as features_lib
from toolkit.estimator.canned import _bt_trees as trees
from toolkit.estimator.canned._bt_trees import TreeParams

__all__ = ["PATH_DELTAS", "PATH_FEATURES", "StopAtTreesHook", "explanations_model_fn", "model_fn"]

v1 = tf.compat.v1
PATH_FEATURES, PATH_DELTAS = "_path_feature_ids", "_path_logit_deltas"
_MIN_BIAS_DELTA = 0.01


class StopAtTreesHook(tf.compat.v1.train.SessionRunHook):
    """Stops training once ``n_trees`` trees are finished."""

    def __init__(self, finished: Any, n_trees: int):
        self._finished, self._n_trees = finished, n_trees

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self._finished)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        finished = run_values.results
        if finished >= self._n_trees - 1:
            finished = run_context.session.run(self._finished)  # the value this step's update wrote
        if finished >= self._n_trees:
            run_context.request_stop()


def _state(name: str, value: Any, dtype: Any) -> Any:
    return v1.get_variable(name, initializer=tf.cast(value, dtype), trainable=False, use_resource=True)


def _read(variable: Any) -> tf.Tensor:
    return tf.convert_to_tensor(variable)


class _Graph:
    """The variables and the forward pass shared by every mode (same names, so any mode restores any checkpoint)."""

    def __init__(self, features: Any, columns: Sequence[Any], params: TreeParams, dimension: int):
        self.params, self.dimension = params, dimension
        self.num_quantiles = int(1.0 / params.quantile_sketch_epsilon)
        self.layout = features_lib.layout(columns, self.num_quantiles)
        self.ensemble = trees.make_ensemble(params, dimension)
        floats = self.layout.n_floats
        self.boundaries = _state("quantile_boundaries", tf.zeros([floats, self.num_quantiles - 1]), tf.float32)
        self.ready = _state("are_boundaries_ready", floats == 0, tf.bool)
        self.buckets = features_lib.bucket_ids(features, columns, _read(self.boundaries) if floats else None)
        self.nodes, self.path_features, self.path_deltas = trees.traverse(self.ensemble, self.buckets,
                                                                          params.max_depth)
        self.logits = trees.logits_of(self.ensemble, self.nodes)


class _Updates:
    """The new value of each variable this step assigns (variables are not hashable: keyed by ``ref()``)."""

    def __init__(self) -> None:
        self._values: dict[Any, tuple[Any, tf.Tensor]] = {}

    def __setitem__(self, variable: Any, value: tf.Tensor) -> None:
        self._values[variable.ref()] = (variable, value)

    def get(self, variable: Any, default: tf.Tensor) -> tf.Tensor:
        return self._values[variable.ref()][1] if variable.ref() in self._values else default

    def values(self) -> list[tf.Tensor]:
        return [value for _, value in self._values.values()]

    def items(self) -> list[tuple[Any, tf.Tensor]]:
        return list(self._values.values())


def _hessians(gradients: tf.Tensor, logits: tf.Tensor, dimension: int) -> tf.Tensor:
    return tf.concat([v1.gradients(gradients[:, k], logits)[0][:, k:k + 1] for k in range(dimension)], axis=1)


def _batch_quantiles(values: tf.Tensor, num_quantiles: int) -> tf.Tensor:
    """``[features, quantiles - 1]``: the batch's ``k / quantiles`` quantiles of each float feature."""
    ordered = tf.sort(tf.transpose(values), axis=1)
    size = tf.cast(tf.shape(ordered)[1], tf.float32)
    fractions = tf.range(1, num_quantiles, dtype=tf.float32) / num_quantiles
    index = tf.minimum(tf.cast(tf.floor(fractions * size), tf.int32), tf.shape(ordered)[1] - 1)
    return tf.gather(ordered, index, axis=1)


def _train_op(graph: _Graph, features: Any, columns: Sequence[Any], loss: tf.Tensor,
              n_batches_per_layer: float) -> Any:
    p, dim, ens = graph.params, graph.dimension, graph.ensemble
    lay = graph.layout
    n = tf.constant(float(n_batches_per_layer))
    width = 1 << max(p.max_depth - 1, 0)                         # the most nodes a layer being split can have
    tree, depth = _state("current_tree", 0, tf.int32), _state("current_depth", 0, tf.int32)
    stats = _state("layer_stats", tf.zeros([width, lay.n_features, lay.n_buckets, 2 * dim]), tf.float32)
    stat_batches = _state("layer_batches", 0.0, tf.float32)
    center = _state("center_bias_needed", p.center_bias, tf.bool)
    bias_stats, bias_batches = _state("bias_stats", tf.zeros([2 * dim]), tf.float32), _state("bias_batches", 0.0,
                                                                                          tf.float32)
    q_sum, q_batches = _state("quantile_sum", tf.zeros(graph.boundaries.shape), tf.float32), \
        _state("quantile_batches", 0.0, tf.float32)
    gradients = v1.gradients(loss, graph.logits)[0]
    hessians = _hessians(gradients, graph.logits, dim)
    ready, needs_bias, t, d = _read(graph.ready), _read(center), _read(tree), _read(depth)
    quantile_phase = ~ready
    bias_phase = ready & needs_bias
    grow_phase = ready & ~needs_bias & (t < p.n_trees)
    new = _Updates()

    # 1. quantiles
    if lay.n_floats:
        batch_q = _batch_quantiles(features_lib.float_values(features, columns), graph.num_quantiles)
        total = _read(q_sum) + tf.where(quantile_phase, batch_q, tf.zeros_like(batch_q))
        count = _read(q_batches) + tf.cast(quantile_phase, tf.float32)
        done = quantile_phase & (count >= n)
        new[graph.boundaries] = tf.where(done, total / tf.maximum(count, 1.0), _read(graph.boundaries))
        new[graph.ready] = ready | done
        new[q_sum], new[q_batches] = tf.where(done, tf.zeros_like(total), total), tf.where(done, 0.0, count)

    # 2. the bias
    batch_bias = tf.concat([tf.reduce_sum(gradients, 0), tf.reduce_sum(hessians, 0)], axis=0)
    b_total = _read(bias_stats) + tf.where(bias_phase, batch_bias, tf.zeros_like(batch_bias))
    b_count = _read(bias_batches) + tf.cast(bias_phase, tf.float32)
    b_done = bias_phase & (b_count >= n)
    mean = b_total / tf.maximum(b_count, 1.0)
    step, _ = trees.newton(mean[:dim], mean[dim:], p)
    new[ens.bias] = _read(ens.bias) + tf.where(b_done, step, tf.zeros_like(step))
    new[center] = needs_bias & ~(b_done & tf.reduce_all(tf.abs(step) < _MIN_BIAS_DELTA))
    new[bias_stats], new[bias_batches] = tf.where(b_done, tf.zeros_like(b_total), b_total), tf.where(b_done, 0.0,
                                                                                                     b_count)

    # 3. grow: statistics of this layer's nodes, per feature and bucket
    first = tf.bitwise.left_shift(1, d) - 1                         # the layer's first node id
    reached = tf.gather(graph.nodes, tf.minimum(t, p.n_trees - 1), axis=1) - first
    in_layer = (reached >= 0) & (reached < tf.bitwise.left_shift(1, d)) & grow_phase
    segment = (reached[:, None] * lay.n_features + tf.range(lay.n_features)[None, :]) * lay.n_buckets + graph.buckets
    segments = width * lay.n_features * lay.n_buckets
    segment = tf.where(in_layer[:, None], segment, tf.fill(tf.shape(segment), segments))  # the rest: a dump segment
    values = tf.tile(tf.concat([gradients, hessians], axis=1)[:, None, :], [1, lay.n_features, 1])
    summed = tf.math.unsorted_segment_sum(values, segment, segments + 1)[:segments]
    s_total = _read(stats) + tf.reshape(summed, [width, lay.n_features, lay.n_buckets, 2 * dim])
    s_count = _read(stat_batches) + tf.cast(grow_phase, tf.float32)
    layer_done = grow_phase & (s_count >= n)
    best = trees.best_splits(s_total / tf.maximum(s_count, 1.0), dim, p)
    local = tf.range(width)
    split = best["valid"] & (local < tf.bitwise.left_shift(1, d)) & layer_done
    node = first + local
    row = tf.minimum(t, p.n_trees - 1)
    at = tf.stack([tf.fill([width], row), node], axis=1)
    left_at, right_at = tf.stack([at[:, 0], 2 * node + 1], 1), tf.stack([at[:, 0], 2 * node + 2], 1)

    def put(variable: Any, where: Any, value: tf.Tensor) -> tf.Tensor:
        old = new.get(variable, _read(variable))
        mask = split if value.shape.rank == 1 else split[:, None]
        return tf.tensor_scatter_nd_update(old, where, tf.where(mask, value, tf.gather_nd(old, where)))

    new[ens.feature] = put(ens.feature, at, best["feature"])
    new[ens.threshold] = put(ens.threshold, at, best["threshold"])
    new[ens.gain] = put(ens.gain, at, best["gain"])
    parent = tf.gather_nd(_read(ens.value), at)
    new[ens.value] = put(ens.value, left_at, parent + p.learning_rate * best["left"])
    new[ens.value] = put(ens.value, right_at, parent + p.learning_rate * best["right"])
    deeper = layer_done & (d + 1 < p.max_depth)  # as upstream, every layer up to max_depth is attempted
    new[depth] = tf.where(layer_done, tf.where(deeper, d + 1, 0), d)
    new[tree] = tf.where(layer_done & ~deeper, t + 1, t)
    new[stats] = tf.where(layer_done, tf.zeros_like(s_total), s_total)
    new[stat_batches] = tf.where(layer_done, 0.0, s_count)

    counted = tf.cast(tf.logical_not(quantile_phase), tf.int64)  # as upstream, a quantile step is not counted
    with tf.control_dependencies([*new.values(), counted]):
        assigns = [variable.assign(value).op for variable, value in new.items()]
    with tf.control_dependencies(assigns):
        step_op = v1.assign_add(v1.train.get_global_step(), counted).op
    v1.summary.scalar("ensemble/num_finalized_trees", t)
    return tf.group(step_op, name="grow_op"), tree


def model_fn(features: Any, labels: Any, mode: str, *, head: Any, columns: Sequence[Any], params: TreeParams,
             n_batches_per_layer: float, name: str = "boosted_trees") -> Any:
    with v1.variable_scope(name):
        v1.train.get_or_create_global_step()
        graph = _Graph(features, columns, params, head.logits_dimension)
        if mode != "train":
            return head.create_estimator_spec(features=features, mode=mode, labels=labels, train_op_fn=tf.no_op,
                                              logits=graph.logits)
        finished: list[Any] = []

        def train_op_fn(loss: Any) -> Any:
            op, tree = _train_op(graph, features, columns, loss, n_batches_per_layer)
            finished.append(tree)
            return op

        spec = head.create_estimator_spec(features=features, mode=mode, labels=labels, train_op_fn=train_op_fn,
                                          logits=graph.logits)
    return spec._replace(training_hooks=(*spec.training_hooks, StopAtTreesHook(finished[0], params.n_trees)))


def explanations_model_fn(features: Any, *, head: Any, columns: Sequence[Any], params: TreeParams,
                          name: str = "boosted_trees") -> Any:
    """PREDICT, plus per example the feature split on and the change of logits at every step of its path."""
    with v1.variable_scope(name):
        v1.train.get_or_create_global_step()
        graph = _Graph(features, columns, params, head.logits_dimension)
        spec = head.create_estimator_spec(features=features, mode="infer", labels=None, train_op_fn=tf.no_op,
                                          logits=graph.logits)
    batch = tf.shape(graph.path_features)[0]
    spec.predictions[PATH_FEATURES] = tf.reshape(graph.path_features, [batch, -1])
    spec.predictions[PATH_DELTAS] = tf.reshape(graph.path_deltas[..., 0], [batch, -1])
    return spec
