"""A gather of distinct rows back into a batch's order, whose gradient is the dense sum per row.

TF's gather gradient is an ``IndexedSlices`` with a row per position, duplicates included; a lookup
that read each distinct row once wants the sum per row instead, computed where the gather runs (the
worker), so each row's gradient crosses to its ps once. Registered as a gradient by op type, not
with ``tf.custom_gradient``: that keeps every function it makes (and with it, every graph built) in
TF's gradient registry. Used by the canned estimators' packed lookups and
``toolkit.compat.v1.nn.embedding_lookup``. On a task probed for tfdist's native kernels (inside
``strategies._native.kernels_on``, as the Estimator builds its between-graph training graph), the
sum is the native ``TfdistRowSum``: the same sums, without TensorFlow's cost per row.

``stitch_partitioned`` puts rows split by one ``dynamic_partition`` back in order; its gradient is
one gather and one split of the incoming gradient instead of TF's gather per part (a packed lookup
stitches some fifty parts' rows on each ps, each step).

``gather_parts`` reads rows of many parts of tables on one task in one native op, where the task
has tfdist's kernels; its gradient gives each part its ``IndexedSlices`` (for any optimizer) and
remembers the whole (``toolkit._compat.tensorflow.parts_gradient``), so TF1's ``AdagradOptimizer``
updates every part in one native op too (``toolkit._compat.tensorflow.native_tf1_adagrad``).
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from strategies import _native as native
from toolkit._compat.tensorflow import PartsGradient, mark_distinct_rows, mark_parts_gradient

__all__ = ["expand_rows", "gather_parts", "stitch_partitioned"]

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


_STITCH_GRAD = "TfdistPartitionedStitch"


@tf.RegisterGradient(_STITCH_GRAD)
def _stitch_gradient(op: Any, grad: Any) -> list[Any]:
    """Each part's gradient: the incoming rows at its places, gathered by one op and split by another.

    (TF's ``dynamic_partition`` would do it in one op, but copies row by row: slower than these four
    for rows of a few floats.)
    """
    parts = len(op.inputs) // 2
    places, which = op.inputs[:parts], op.inputs[0].op.inputs[1]
    rows = tf.gather(tf.convert_to_tensor(grad), tf.concat(places, axis=0))
    sizes = tf.raw_ops.Bincount(arr=which, size=parts, weights=tf.constant([], which.dtype))
    return [None] * parts + tf.split(rows, sizes, num=parts)


def stitch_partitioned(places: list[tf.Tensor], parts: list[tf.Tensor]) -> tf.Tensor:
    """``tf.dynamic_stitch(places, parts)`` in a TF1 graph, for ``places`` = every output of one
    ``tf.dynamic_partition(tf.range(n), which, len(places))``: ``parts[i]`` holds the rows of the
    places where ``which`` is ``i``, and the result is all of them in ``which``'s order.

    Its gradient is what TF's per-part gathers compute, in four ops however many parts.
    """
    source = places[0].op
    partitioned = (source.type == "DynamicPartition" and source.inputs[0].op.type == "Range"
                   and len(source.outputs) == len(places)
                   and all(made is given for made, given in zip(source.outputs, places, strict=True)))
    if not partitioned:
        raise ValueError("stitch_partitioned: places must be every output of one dynamic_partition of a range")
    with source.graph.gradient_override_map({"DynamicStitch": _STITCH_GRAD}):
        return tf.dynamic_stitch(places, parts)


@tf.RegisterGradient("TfdistGatherParts")
def _parts_gradient(op: Any, grad: Any) -> list[Any]:
    """Each part's ``IndexedSlices``: its rows' gradients at its (distinct) rows, split by ``which``."""
    count = op.get_attr("N")
    which, rows = op.inputs[count], op.inputs[count + 1]
    grad = tf.convert_to_tensor(grad)
    values = tf.dynamic_partition(grad, which, count)
    indices = tf.dynamic_partition(rows, which, count)
    slices = []
    for i, (part_values, part_rows) in enumerate(zip(values, indices, strict=True)):
        mark_distinct_rows(part_rows)
        mark_parts_gradient(part_values, PartsGradient(op, grad), i)
        slices.append(tf.IndexedSlices(part_values, part_rows, tf.raw_ops.VariableShape(input=op.inputs[i])))
    return [*slices, None, None]


def gather_parts(parts: list[Any], which: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
    """``[len(rows), width]``: row ``rows[i]`` of ``parts[which[i]]`` (variables of one width on one task),
    natively (``native.usable_on`` their device must hold), in a TF1 graph."""
    return native.gather_parts([p.handle for p in parts], which, rows, parts[0].dtype.base_dtype)
