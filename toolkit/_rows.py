"""A gather of distinct rows back into a batch's order, whose gradient is the dense sum per row.

TF's gather gradient is an ``IndexedSlices`` with a row per position, duplicates included; a lookup
that read each distinct row once wants the sum per row instead, computed where the gather runs (the
worker), so each row's gradient crosses to its ps once. Registered as a gradient by op type, not
with ``tf.custom_gradient``: that keeps every function it makes (and with it, every graph built) in
TF's gradient registry. Used by the canned estimators' packed lookups and
``toolkit.compat.v1.nn.embedding_lookup``. On a task probed for tfdist's native kernels (inside
``strategies._native.kernels_on``, as the Estimator builds its between-graph training graph), the
sum is the native ``TfdistRowSum``: the same sums, without TensorFlow's cost per row.
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from strategies import _native as native

__all__ = ["expand_rows"]

_EXPAND_GRAD = "TfdistPackedRowsExpand"


@tf.RegisterGradient(_EXPAND_GRAD)
def _expand_gradient(op: Any, grad: tf.Tensor) -> tuple[tf.Tensor, None, None]:
    """The distinct rows' gradient: each position's summed into its row's."""
    params, indices = op.inputs[0], op.inputs[1]
    if grad.shape.rank == 2 and grad.dtype in (tf.float32, tf.float64) and native.usable_on(op.device):
        with tf.device(op.device):  # where the probe found the kernel: the gather's own task
            return native.row_sum(grad, indices, tf.shape(params)[0]), None, None
    return tf.math.unsorted_segment_sum(grad, indices, tf.shape(params)[0]), None, None


def expand_rows(rows: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """``tf.gather(rows, positions)`` in a TF1 graph, with the gradient ``unsorted_segment_sum`` per row."""
    with rows.graph.gradient_override_map({"GatherV2": _EXPAND_GRAD}):
        return tf.gather(rows, positions)
