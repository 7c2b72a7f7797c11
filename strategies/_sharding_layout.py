"""Which row of a sharded table lives in which shard.

Two layouts, both with the shard sizes TensorFlow's partitioners produce (the
first ``rows % num_shards`` shards get one extra row), so shards created by a
``ParameterServerStrategy`` partitioner fit either layout:

* ``div``: contiguous row ranges, the layout of TF's ``ShardedVariable``. Its
  checkpoints hold one logical table, so they restore into any shard count.
* ``mod``: row ``r`` lives in shard ``r % num_shards``. Small ids (usually the
  most frequent ones) spread over every shard, balancing the load; its
  checkpoints restore only into the same shard count.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from strategies._sharding_errors import ShardingError
from tf_config.checks import check_int

__all__ = ["PARTITIONS", "ShardLayout"]

#: up to this many shards a div route compares each id with every shard start; above, a binary search
_COMPARE_SHARDS = 8


def _div_route(layout: ShardLayout, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    # Comparisons against the shards' first rows, not int64 division: a lookup routes every id of the
    # batch each step, and int64 FloorDiv/FloorMod cost several times a compare-and-subtract on the CPU.
    starts = np.cumsum((0, *layout.sizes[:-1]), dtype=np.int64)
    if layout.num_shards == 1:
        return tf.zeros_like(ids, tf.int32), ids
    if layout.num_shards <= _COMPARE_SHARDS:
        shard = tf.add_n([tf.cast(ids >= int(start), tf.int32) for start in starts[1:]])
    else:
        flat = tf.reshape(ids, [1, -1])
        shard = tf.reshape(tf.searchsorted(tf.constant(starts[None, :]), flat, side="right", out_type=tf.int32) - 1,
                           tf.shape(ids))
    return shard, ids - tf.gather(tf.constant(starts), shard)


def _mod_route(layout: ShardLayout, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    n = tf.constant(layout.num_shards, tf.int64)
    return tf.cast(ids % n, tf.int32), ids // n


def _div_rows(layout: ShardLayout, shard: int) -> np.ndarray:
    start = sum(layout.sizes[:shard])
    return np.arange(start, start + layout.sizes[shard], dtype=np.int64)


def _mod_rows(layout: ShardLayout, shard: int) -> np.ndarray:
    return np.arange(shard, layout.rows, layout.num_shards, dtype=np.int64)


# partition name -> (route: ids -> (shard, local id), rows: shard -> global ids)
PARTITIONS: dict[str, tuple[Callable, Callable]] = {
    "div": (_div_route, _div_rows),
    "mod": (_mod_route, _mod_rows),
}


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """How ``rows`` rows are split into ``num_shards`` shards.

    Attributes:
        partition: ``"div"`` or ``"mod"`` (see the module docstring).
        rows: rows of the whole (logical) table.
        num_shards: number of shards, 1..rows.
    """

    partition: str
    rows: int
    num_shards: int

    def __post_init__(self) -> None:
        if self.partition not in PARTITIONS:
            raise ShardingError((
                f"`partition` is {self.partition!r}; expected one of {sorted(PARTITIONS)}. "
                "Use 'div' (checkpoints restore into any shard count) or 'mod' (balances small ids)."),
                field="partition")
        for field in ("rows", "num_shards"):
            check_int(getattr(self, field), field=field, error=ShardingError, fix="")
        if self.num_shards > self.rows:
            raise ShardingError((
                f"`num_shards` is {self.num_shards} but the table has only {self.rows} rows. "
                f"Use at most {self.rows} shards."), field="num_shards")

    @property
    def sizes(self) -> tuple[int, ...]:
        """Rows held by each shard."""
        big, rest = divmod(self.rows, self.num_shards)
        return tuple(big + (1 if i < rest else 0) for i in range(self.num_shards))

    def route(self, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """int64 ``ids`` -> (int32 shard of each id, int64 row inside that shard)."""
        return PARTITIONS[self.partition][0](self, ids)

    def global_rows(self, shard: int) -> np.ndarray:
        """The table rows shard ``shard`` holds, in its local order."""
        return PARTITIONS[self.partition][1](self, shard)

    def describe_rows(self, shard: int) -> str:
        """``'0..499'`` for div, ``'1::2'`` (every 2nd row from 1) for mod."""
        if self.partition == "div":
            rows = self.global_rows(shard)
            return f"{rows[0]}..{rows[-1]}"
        return f"{shard}::{self.num_shards}"

    def signature(self, dim: int) -> str:
        """What a checkpoint must match to restore into this layout."""
        shards = "any" if self.partition == "div" else str(self.num_shards)
        return f"partition={self.partition} rows={self.rows} dim={dim} shards={shards}"
