"""The ensemble as graph variables, and the tree maths: traversal, Newton leaf weights, best splits.

Each tree is a complete binary tree of ``2^(max_depth+1) - 1`` nodes (node ``n``'s
children are ``2n+1`` and ``2n+2``) held in ``[n_trees, nodes]`` variables: the
feature id a node splits on (-1: a leaf), its threshold bucket (``bucket <=
threshold`` goes left), its gain and its value (the logits of an example that
ends there). An example's logits are the bias plus, for every tree, the value of
the node it reaches. A split's gain and leaf weight are the second-order
(Newton) ones of TF's kernels: with ``G``, ``H`` the summed gradients and
hessians and ``G'`` = ``G`` soft-thresholded by ``l1``, a node's weight is
``-G' / (H + l2)`` and its gain ``G'^2 / (H + l2)``; a split gains
``gain(left) + gain(right) - gain(node) - tree_complexity``, and both sides need
a hessian of at least ``min_node_weight``. With ``pruning_mode='none'`` a node takes its
best candidate even at zero gain, one side empty included, as TF's kernels did: each
layer then moves every example by a Newton step.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

__all__ = ["Ensemble", "TreeParams", "best_splits", "logits_of", "make_ensemble", "newton", "traverse"]

v1 = tf.compat.v1


class TreeParams(NamedTuple):
    n_trees: int
    max_depth: int
    learning_rate: float
    l1: float
    l2: float
    tree_complexity: float
    min_node_weight: float
    center_bias: bool
    pruning_mode: str
    quantile_sketch_epsilon: float


class Ensemble(NamedTuple):
    feature: Any      # [n_trees, nodes] int32, -1 for a leaf
    threshold: Any    # [n_trees, nodes] int32
    gain: Any         # [n_trees, nodes] float32
    value: Any        # [n_trees, nodes, logits_dimension] float32
    bias: Any         # [logits_dimension] float32


def _variable(name: str, value: Any, dtype: Any) -> Any:
    return v1.get_variable(name, initializer=tf.cast(value, dtype), trainable=False, use_resource=True)


def make_ensemble(params: TreeParams, dimension: int) -> Ensemble:
    nodes = (1 << (params.max_depth + 1)) - 1
    shape = [params.n_trees, nodes]
    return Ensemble(
        feature=_variable("node_feature", tf.fill(shape, -1), tf.int32),
        threshold=_variable("node_threshold", tf.zeros(shape, tf.int32), tf.int32),
        gain=_variable("node_gain", tf.zeros(shape), tf.float32),
        value=_variable("node_value", tf.zeros([*shape, dimension]), tf.float32),
        bias=_variable("bias", tf.zeros([dimension]), tf.float32))


def traverse(ensemble: Ensemble, buckets: tf.Tensor, max_depth: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Walks every example down every tree.

    Returns ``(nodes, path_features, path_deltas)``: the node reached in each tree
    ``[batch, n_trees]``, and per tree and level the feature split on (-1: none)
    ``[batch, n_trees, max_depth]`` and the change of logits that step made
    ``[batch, n_trees, max_depth, dimension]`` (for directional feature contributions).
    """
    feature = tf.convert_to_tensor(ensemble.feature)
    threshold = tf.convert_to_tensor(ensemble.threshold)
    value = tf.convert_to_tensor(ensemble.value)
    batch = tf.shape(buckets)[0]
    n_trees = tf.shape(feature)[0]
    trees = tf.tile(tf.range(n_trees)[None, :], [batch, 1])                   # [batch, trees]
    nodes = tf.zeros_like(trees)
    features, deltas = [], []
    for _ in range(max_depth):
        at = tf.stack([trees, nodes], axis=-1)
        split_on = tf.gather_nd(feature, at)                                     # [batch, trees]
        bucket = tf.gather(buckets, tf.maximum(split_on, 0), axis=1, batch_dims=1)
        left = bucket <= tf.gather_nd(threshold, at)
        child = tf.where(left, 2 * nodes + 1, 2 * nodes + 2)
        moved = tf.where(split_on >= 0, child, nodes)
        before = tf.gather_nd(value, at)
        after = tf.gather_nd(value, tf.stack([trees, moved], axis=-1))
        features.append(split_on)
        deltas.append(after - before)
        nodes = moved
    if not features:
        return nodes, tf.zeros([batch, n_trees, 0], tf.int32), tf.zeros([batch, n_trees, 0, tf.shape(value)[2]])
    return nodes, tf.stack(features, axis=2), tf.stack(deltas, axis=2)


def logits_of(ensemble: Ensemble, nodes: tf.Tensor) -> tf.Tensor:
    """``[batch, dimension]``: the bias plus each tree's value at the reached node."""
    trees = tf.tile(tf.range(tf.shape(nodes)[1])[None, :], [tf.shape(nodes)[0], 1])
    values = tf.gather_nd(tf.convert_to_tensor(ensemble.value), tf.stack([trees, nodes], axis=-1))
    return tf.convert_to_tensor(ensemble.bias)[None, :] + tf.reduce_sum(values, axis=1)


def newton(g: tf.Tensor, h: tf.Tensor, params: TreeParams) -> tuple[tf.Tensor, tf.Tensor]:
    """``(weight, gain)`` of a node with summed gradients ``g`` and hessians ``h`` (last axis: logits)."""
    shrunk = tf.sign(g) * tf.maximum(tf.abs(g) - params.l1, 0.0)
    denominator = h + params.l2
    safe = tf.where(denominator > 0, denominator, tf.ones_like(denominator))
    weight = tf.where(denominator > 0, -shrunk / safe, tf.zeros_like(g))
    gain = tf.where(denominator > 0, shrunk * shrunk / safe, tf.zeros_like(g))
    return weight, tf.reduce_sum(gain, axis=-1)


def best_splits(stats: tf.Tensor, dimension: int, params: TreeParams) -> dict[str, tf.Tensor]:
    """The best split of each node from its statistics ``[nodes, features, buckets, 2 * dimension]``.

    Returns per node: ``feature``, ``threshold``, ``gain``, ``left``/``right`` weights and ``valid``.
    """
    g, h = stats[..., :dimension], stats[..., dimension:]
    left_g, left_h = tf.cumsum(g, axis=2), tf.cumsum(h, axis=2)
    total_g, total_h = left_g[:, :, -1:], left_h[:, :, -1:]
    right_g, right_h = total_g - left_g, total_h - left_h
    left_w, left_gain = newton(left_g, left_h, params)
    right_w, right_gain = newton(right_g, right_h, params)
    _, node_gain = newton(total_g, total_h, params)
    gain = left_gain + right_gain - node_gain - params.tree_complexity           # [nodes, features, buckets]
    hess_l, hess_r = tf.reduce_sum(left_h, -1), tf.reduce_sum(right_h, -1)
    ok = (hess_l >= params.min_node_weight) & (hess_r >= params.min_node_weight)
    if params.pruning_mode != "none":
        ok &= (hess_l > 0) & (hess_r > 0)
    gain = tf.where(ok, gain, tf.fill(tf.shape(gain), -float("inf")))
    n_nodes, n_buckets = tf.shape(gain)[0], tf.shape(gain)[2]
    flat = tf.reshape(gain, [n_nodes, -1])
    best = tf.argmax(flat, axis=1, output_type=tf.int32)
    best_gain = tf.reduce_max(flat, axis=1)
    feature, threshold = best // n_buckets, best % n_buckets
    at = tf.stack([tf.range(n_nodes), feature, threshold], axis=1)
    if params.pruning_mode == "none":
        # TF's kernels: the best candidate even at zero gain, an empty side included (a node left with one
        # example, or one bucket, still moves by its Newton step), for a node that examples reached
        reached = tf.reduce_sum(total_h[:, 0, 0, :], axis=-1) > 0
        valid = tf.math.is_finite(best_gain) & (best_gain >= 0.0) & reached
    else:
        valid = tf.math.is_finite(best_gain) & (best_gain > 1e-12)
    return {"feature": feature, "threshold": threshold, "gain": best_gain,
            "left": tf.gather_nd(left_w, at), "right": tf.gather_nd(right_w, at), "valid": valid}
