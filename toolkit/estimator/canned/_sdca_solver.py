"""The SDCA solver behind ``experimental.LinearSDCA``: TensorFlow's SDCA kernels, their example state, the update.

Stochastic dual coordinate ascent keeps, for every example it has seen, a
small state (the dual variable and the example's last primal/dual loss and
weight), found by a 128-bit fingerprint of the example id. The state lives in
``num_table_shards`` dense hash tables; the kernel (``SdcaOptimizerV2``) reads
it with the batch, returns the new state and the weight deltas, and the deltas
go to *unshrunk* copies of the model's weights. The model's own weights are
then set from those copies, after the L1 proximal step when L1 is on, so the
weights a checkpoint holds are the regularised ones (as tf.estimator's
``_SDCAModel.update_weights``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

__all__ = ["Examples", "train_op"]

v1 = tf.compat.v1
_STATE_WIDTH = 4      # dual, primal loss, dual loss, example weight (the kernel's example_state_data columns)


@dataclass(frozen=True)
class Examples:
    """One batch as the kernel reads it.

    ``sparse``: per categorical column, (example indices, feature ids, values)
    with each id once per example; ``dense``: per dense column (and the bias, a
    column of ones), a ``[batch, dim]`` float tensor.
    """

    ids: tf.Tensor
    labels: tf.Tensor
    weights: tf.Tensor
    sparse: Sequence[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
    dense: Sequence[tf.Tensor]


class _ShardedTable:
    """Example states keyed by the fingerprint ``[n, 2]`` (int64); a key's shard is its first half mod shards."""

    def __init__(self, num_shards: int) -> None:
        self._tables = [tf.lookup.experimental.DenseHashTable(
            key_dtype=tf.int64, value_dtype=tf.float32, default_value=[0.0] * _STATE_WIDTH,
            empty_key=[0, 0], deleted_key=[1, 1], name=f"sdca_example_state_{i}")  # the fingerprint is never 0 or 1
            for i in range(num_shards)]

    def _split(self, keys: tf.Tensor) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        n = len(self._tables)
        shard = tf.cast(tf.math.floormod(keys[:, 0], n), tf.int32)
        positions = tf.dynamic_partition(tf.range(tf.shape(keys)[0]), shard, n)
        return positions, tf.dynamic_partition(keys, shard, n)

    def lookup(self, keys: tf.Tensor) -> tf.Tensor:
        if len(self._tables) == 1:
            return self._tables[0].lookup(keys)
        positions, parts = self._split(keys)
        return tf.dynamic_stitch(positions, [t.lookup(k) for t, k in zip(self._tables, parts, strict=True)])

    def insert(self, keys: tf.Tensor, values: tf.Tensor) -> Any:
        if len(self._tables) == 1:
            return self._tables[0].insert(keys, values)
        positions, parts = self._split(keys)
        return tf.group(*[t.insert(k, tf.gather(values, p))
                          for t, k, p in zip(self._tables, parts, positions, strict=True)])

    def size(self) -> tf.Tensor:
        return tf.add_n([t.size() for t in self._tables])

    def values(self) -> list[tf.Tensor]:
        return [t.export()[1] for t in self._tables]


def _unshrunk(var: Any) -> Any:
    """The slot holding ``var``'s weights before the L1 proximal step (zeros at first, as tf.estimator's)."""
    with tf.device(var.device):
        return v1.get_variable(f"{var.op.name}_unshrunk", shape=var.shape, dtype=tf.float32,
                               initializer=v1.zeros_initializer(), trainable=False,
                               collections=[v1.GraphKeys.GLOBAL_VARIABLES])


def _shrink(weights: tf.Tensor, amount: float) -> tf.Tensor:
    return tf.sign(weights) * tf.maximum(0.0, tf.abs(weights) - amount)


def _duality_gap(table: _ShardedTable, model_vars: Sequence[Any], l1: float, l2: float) -> tf.Tensor:
    """(primal + dual loss + l1 |w| + l2 |w|^2) / total example weight: near 0 once the solver has converged."""
    sums = tf.add_n([tf.reduce_sum(tf.cast(values, tf.float64), 0) for values in table.values()])
    l1_loss = l1 * tf.add_n([tf.reduce_sum(tf.abs(tf.cast(v, tf.float64))) for v in model_vars])
    l2_loss = l2 * tf.add_n([tf.reduce_sum(tf.square(tf.cast(v, tf.float64))) for v in model_vars])
    return (sums[1] + sums[2] + l1_loss + l2_loss) / sums[3]


def train_op(examples: Examples, *, sparse_vars: Sequence[Any], dense_vars: Sequence[Any], loss_type: str,
             l1: float, l2: float, num_loss_partitions: int, num_table_shards: int, adaptive: bool,
             global_step: Any) -> Any:
    """One SDCA step on the batch, then the model's weights set from the unshrunk slots; bumps ``global_step``."""
    table = _ShardedTable(num_table_shards)
    with v1.name_scope("sdca"):
        sparse_slots = [_unshrunk(v) for v in sparse_vars]
        dense_slots = [_unshrunk(v) for v in dense_vars]
        keys = tf.raw_ops.SdcaFprint(input=examples.ids)
        state = table.lookup(keys)
        unique_ids = [tf.unique(ids)[0] for _, ids, _ in examples.sparse]
        state_update, sparse_deltas, dense_deltas = tf.raw_ops.SdcaOptimizerV2(
            sparse_example_indices=[rows for rows, _, _ in examples.sparse],
            sparse_feature_indices=[ids for _, ids, _ in examples.sparse],
            sparse_feature_values=[values for _, _, values in examples.sparse],
            dense_features=list(examples.dense),
            example_weights=examples.weights, example_labels=examples.labels,
            sparse_indices=unique_ids,
            sparse_weights=[tf.reshape(tf.gather(slot, ids), [-1]) for slot, ids in zip(sparse_slots, unique_ids,
                                                                                      strict=True)],
            dense_weights=[tf.reshape(slot, [-1]) for slot in dense_slots],
            example_state_data=state, loss_type=loss_type, l1=l1, l2=l2,
            num_loss_partitions=num_loss_partitions, num_inner_iterations=1, adaptive=adaptive)
        with tf.control_dependencies([state_update]):
            updates = [table.insert(keys, state_update)]
            updates += [v1.scatter_add(slot, ids, tf.reshape(delta, [-1, 1]))
                        for slot, ids, delta in zip(sparse_slots, unique_ids, sparse_deltas, strict=True)]
            updates += [v1.assign_add(slot, tf.reshape(delta, slot.shape))
                        for slot, delta in zip(dense_slots, dense_deltas, strict=True)]
        with tf.control_dependencies(updates):
            copies = [v1.assign(var, _shrink(slot.read_value(), l1 / l2) if l1 > 0 else slot.read_value())
                      for var, slot in zip([*sparse_vars, *dense_vars], [*sparse_slots, *dense_slots], strict=True)]
        v1.summary.scalar("approximate_duality_gap", _duality_gap(table, [*sparse_vars, *dense_vars], l1, l2))
        v1.summary.scalar("examples_seen", table.size())
        with tf.control_dependencies(copies):
            return v1.assign_add(global_step, 1).op
