"""The placement report of sharded tables: which shard of which table lives where, how big, per-device totals."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import tensorflow as tf

from strategies._device_map_report import render_table
from strategies._placement import describe_bytes

__all__ = ["placement_report"]


class _Placement(Protocol):
    """A ``strategies.sharding.ShardPlacement`` as the report reads it (described here: imports run one way)."""

    @property
    def table(self) -> str: ...
    @property
    def shard(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def rows(self) -> str: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def slot_bytes(self) -> int: ...


class _Table(Protocol):
    """A ``strategies.sharding.ShardedTable`` as the report reads it."""

    name: str

    def placement(self, *, slots: Iterable[Any] = ()) -> Sequence[_Placement]: ...


def _task_label(device: str) -> str:
    """``/job:ps/replica:0/task:1/device:CPU:0`` -> ``ps-1 CPU:0``."""
    spec = tf.DeviceSpec.from_string(device)
    if spec.job is None:
        return device
    return f"{spec.job}-{spec.task or 0} {spec.device_type or 'CPU'}:{spec.device_index or 0}"


def placement_report(
    tables: Iterable[_Table], *, slots: Mapping[str, Iterable[_Table]] | None = None
) -> str:
    """Which shard of which table lives where, how big, and per-device totals.

    Args:
        tables: the tables to report.
        slots: optimizer slot tables by table name (e.g. ``optimizer.slots_by_table()``),
            so the report counts the memory an optimizer adds next to each shard.
    """
    slots = dict(slots or {})
    rows: list[tuple[str | int, ...]] = []
    totals: dict[str, list[int]] = {}  # device -> [shards, bytes, slot bytes]
    for table in tables:
        for p in table.placement(slots=slots.get(table.name, ())):
            rows.append((p.table, p.shard, _task_label(p.device), p.rows, f"{p.num_rows:,}",
                         describe_bytes(p.bytes), describe_bytes(p.slot_bytes)))
            entry = totals.setdefault(p.device, [0, 0, 0])
            entry[0] += 1
            entry[1] += p.bytes
            entry[2] += p.slot_bytes
    table_text = render_table(("table", "shard", "task / device", "rows", "count", "bytes", "slot bytes"),
                              rows, right=(1, 4, 5, 6))
    device_rows = [(_task_label(d), n, describe_bytes(b), describe_bytes(s)) for d, (n, b, s) in sorted(totals.items())]
    device_text = render_table(("task / device", "shards", "bytes", "slot bytes"), device_rows, right=(1, 2, 3))
    return table_text + "\n\n" + device_text
