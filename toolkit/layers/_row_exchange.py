"""One transfer per ps for the row gradients of tables looked up with the same ids.

A wide & deep model looks its two tables up with the same ids, so on each ps both
tables' shards get gradients for the same rows, in the same order (the lookup
de-duplicates and routes the ids once for both). Sent as they are, each table's
row gradient and each table's row indices cross from the worker to the ps as a
tensor of its own. :func:`exchange_rows` sends the gradients of such tables as
one ``[rows, sum of dims]`` tensor, concatenated on the worker and split on the
ps, and names the rows by the routed ids the lookup already sent there (not by
each gradient's own reshaped copy of them): one gradient transfer per ps and
step instead of one per table. The values are the same tensors, so the update
is the same.

Only graph-mode gradients whose rows are one lookup's routed ids, computed on a
task other than their shard's, are grouped; everything else is left as it is.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = ["exchange_rows", "routed_rows"]


def routed_rows(indices: tf.Tensor) -> tf.Tensor | None:
    """The lookup's own 1-D int64 routed ids that ``indices`` reshape (None: not one lookup's rows)."""
    op = getattr(indices, "op", None)  # eager tensors have none
    tensor = indices
    while op is not None and op.type in ("Reshape", "Identity"):
        tensor = op.inputs[0]
        op = tensor.op
    if op is None or op.type not in ("Unique", "DynamicPartition"):
        return None
    if tensor.dtype != tf.int64 or tensor.shape.rank != 1:
        return None
    return tensor


def _task(device: str) -> tuple[Any, ...] | None:
    if not device:
        return None
    spec = tf.DeviceSpec.from_string(device)
    return spec.job, spec.replica or 0, spec.task


def _groupable(shard: tf.Variable, gradient: Any) -> tuple[Any, ...] | None:
    """The key of the group ``gradient`` may travel in (None: it travels alone)."""
    if tf.executing_eagerly() or not isinstance(gradient, tf.IndexedSlices):
        return None
    rows = routed_rows(gradient.indices)
    values = gradient.values
    if rows is None or values.shape.rank != 2 or values.shape[1] is None:
        return None
    source, target = _task(values.device), _task(shard.device)
    if source is None or target is None or source == target:
        return None
    return rows.ref(), shard.device, values.device, values.dtype


def exchange_rows(shards_and_gradients: Sequence[tuple[tf.Variable, Any]]) -> list[tuple[tf.Tensor, tf.Tensor] | None]:
    """For each ``(shard, gradient)``: ``(rows, row gradients)`` already moved to its shard's task, or None.

    Gradients of shards on one ps whose rows are the same routed ids travel as one tensor; a
    gradient with no partner gets None (the caller de-duplicates and sends it as before).
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, (shard, gradient) in enumerate(shards_and_gradients):
        key = _groupable(shard, gradient)
        if key is not None:
            groups.setdefault(key, []).append(index)
    out: list[tuple[tf.Tensor, tf.Tensor] | None] = [None] * len(shards_and_gradients)
    for (rows_ref, shard_device, values_device, _), members in groups.items():
        if len(members) < 2:
            continue
        values = [shards_and_gradients[i][1].values for i in members]
        with tf.device(values_device):
            packed = tf.concat(values, axis=1)
        with tf.device(shard_device):
            parts = tf.split(packed, [int(v.shape[1]) for v in values], axis=1)
        for index, part in zip(members, parts, strict=True):
            out[index] = (rows_ref.deref(), part)
    return out
