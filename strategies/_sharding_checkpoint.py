"""Checkpointing a sharded table as one logical tensor.

Each shard is saved as a *slice* of one ``[rows, dim]`` tensor, the way TF
saves its own ``ShardedVariable``. A ``div`` table therefore restores into any
number of shards: each new shard reads its own row range. The entry's key
names the partition, the shape and (for ``mod`` tables, which only restore
into the same shard count) the shard count, so an incompatible table finds no
entry to read; a small "layout" entry, checked on restore, turns that into an
error that says what to do, instead of a shape error or a scrambled restore.

This relies on TensorFlow's saveable-object protocol (the one
``ShardedVariable`` uses), which is internal API; the pinned TF 2.21 has it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import tensorflow as tf

from strategies._compat import ResourceVariableSaveable, SaveableObject, SaveSpec
from strategies._sharding_errors import ShardingError
from strategies._sharding_layout import ShardLayout

__all__ = ["table_saveables"]


class _Table(Protocol):
    """What a checkpoint needs of a ``strategies.sharding.ShardedTable`` (described here: imports run one way)."""

    name: str
    layout: ShardLayout

    @property
    def shards(self) -> Sequence[tf.Variable]: ...

    @property
    def dim(self) -> int: ...

    @property
    def rows(self) -> int: ...

    @property
    def partition(self) -> str: ...

    @property
    def num_shards(self) -> int: ...


class _LayoutSaveable(SaveableObject):
    """Saves the layout signature; on restore, refuses an incompatible one."""

    def __init__(self, table: _Table, name: str) -> None:
        self._table = table
        self._signature = table.layout.signature(table.dim)
        tensor = tf.constant(self._signature)
        super().__init__(tensor, [SaveSpec(tensor, "", name)], name)

    def restore(self, restored_tensors: Sequence[tf.Tensor], restored_shapes: object) -> tf.Operation:
        restored = restored_tensors[0]
        if not hasattr(restored, "numpy"):  # restored inside a traced function (parameter servers): check there
            return tf.debugging.assert_equal(restored, tf.constant(self._signature), message=(
                f"sharded table {self._table.name!r}: the checkpoint holds another layout than this table's "
                f"({self._signature}). To restore it, build the table as it was saved (same partition, rows and "
                "width; a 'mod' table also the same num_shards)."))
        saved = restored.numpy().decode()
        if saved != self._signature:
            raise ShardingError(_mismatch_message(self._table, saved, self._signature), field="checkpoint")
        return tf.no_op()


def _mismatch_message(table: _Table, saved: str, current: str) -> str:
    fields = dict(part.split("=", 1) for part in saved.split())
    advice = []
    if fields.get("partition") == "mod" and fields.get("shards") != str(table.num_shards):
        advice.append(f"build the table with num_shards={fields.get('shards')} (mod checkpoints only "
                      "restore into the same shard count; 'div' tables restore into any count)")
    if fields.get("partition") != table.partition:
        advice.append(f"build the table with partition={fields.get('partition')!r}")
    if fields.get("rows") != str(table.rows) or fields.get("dim") != str(table.dim):
        advice.append(f"build the table with {fields.get('rows')} rows of width {fields.get('dim')}")
    how = "; ".join(advice) or "rebuild the table as it was when saved"
    return (f"sharded table {table.name!r}: the checkpoint holds a table with {saved} but this "
            f"table has {current}. To restore it, {how}.")


def table_saveables(table: _Table) -> dict[str, Callable[[str], SaveableObject | list[SaveableObject]]]:
    """The ``_gather_saveables_for_checkpoint`` answer of a sharded table."""
    # the key names everything a restore must match, so a mismatched table finds no
    # entry to read (instead of a shape error or scrambled rows) and the layout check explains
    shards_part = "" if table.partition == "div" else str(table.num_shards)
    key = f"{table.partition}{shards_part}_{table.rows}x{table.dim}"

    def shards(name: str) -> list[SaveableObject]:
        out, offset = [], 0
        for shard in table.shards:
            info = tf.Variable.SaveSliceInfo(
                full_name=name,
                full_shape=[table.rows, table.dim],
                var_offset=[offset, 0],
                var_shape=shard.shape.as_list(),
            )
            out.append(ResourceVariableSaveable(shard, info.spec, name))
            offset += int(shard.shape[0])
        return out

    return {key: shards, "layout": lambda name: _LayoutSaveable(table, name)}
