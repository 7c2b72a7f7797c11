"""Tables too large for one machine, sharded across parameter servers.

With Keras 3, a partitioned ``Embedding`` under ``ParameterServerStrategy`` is
split into shards, but then cannot train: Keras optimizers fail on
``ShardedVariable``, their slots land on the coordinator, and the forward pass
concatenates the whole table every step. A :class:`ShardedTable` keeps the
shards as plain ``tf.Variable`` objects and does the sharded work itself:

* creation: under ``ParameterServerStrategy`` the strategy's partitioner
  decides the shards (one per ps for ``fixed_shards``); without a strategy,
  shard ``i`` goes to ``devices[i]`` (local devices, or ``/job:ps/...`` tasks
  of a cluster this process connected to);
* lookup: ids are routed to their shard, each shard gathers only its rows on
  its own device, and the rows are stitched back; the table is never
  materialised;
* slots: :meth:`ShardedTable.like` makes optimizer slot tables with the same
  layout, each slot shard on its table shard's device;
* checkpoints: see ``_sharding_checkpoint`` (``div`` tables restore into any
  shard count).

Example:
    >>> table = ShardedTable.create("items", 1_000_000, 32,             # doctest: +SKIP
    ...                             initializer=keras.initializers.RandomUniform(),
    ...                             devices=ps_devices(cfg))
    >>> vectors = table.lookup(item_ids)  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

from strategies._compat import SaveableObject, Trackable, graph_cache, pss_partitioning
from strategies._placement import describe_bytes, resolve_device
from strategies._sharding_checkpoint import table_saveables
from strategies._sharding_errors import ShardingError
from strategies._sharding_init import shard_initializer
from strategies._sharding_layout import PARTITIONS, ShardLayout
from strategies._sharding_report import placement_report
from strategies._sharding_scope import (
    _from_source,
    _partition_aware,
    _ps_strategy,
    colocated_with,
    has_shard_source,
    ps_devices,
    shard_source,
)

__all__ = [
    "AUTO_SHARD_BYTES",
    "TASK_MEMORY_BYTES",
    "PARTITIONS",
    "ShardLayout",
    "ShardPlacement",
    "ShardedTable",
    "ShardingError",
    "colocated_with",
    "has_shard_source",
    "shard_source",
    "placement_report",
    "ps_devices",
]

logger = logging.getLogger(__name__)

#: Under ParameterServerStrategy (with no variable partitioner), a table of at least this many bytes is split
#: into one shard per ps; smaller ones stay whole on one ps. Override per layer (``min_shard_bytes=``) or here.
AUTO_SHARD_BYTES = 1 << 20


#: The memory of one task that holds shards (a ps), in bytes; None: this machine's physical memory.
#: A table whose largest shard would not fit is refused before anything is created.
TASK_MEMORY_BYTES: int | None = None


def _task_memory() -> int:
    if TASK_MEMORY_BYTES is not None:
        return int(TASK_MEMORY_BYTES)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _check_fits(name: str, dim: int, dtype: tf.DType, layout: ShardLayout) -> None:
    """A ``ShardingError`` for a table whose largest shard is larger than a task's memory (estimated at build)."""
    shard_bytes = max(layout.sizes) * dim * dtype.size
    budget = _task_memory()
    if shard_bytes > budget:
        raise ShardingError((
            f"embedding table {name!r} ({layout.rows:,} x {dim}, {describe_bytes(layout.rows * dim * dtype.size)}) "
            f"in {layout.num_shards} shard(s) needs {describe_bytes(shard_bytes)} per shard before its optimizer "
            f"slots (Adagrad doubles it, Adam triples it), more than a task's memory ({describe_bytes(budget)}). "
            "Add parameter servers (one shard each), hash the ids into fewer rows, or, if the ps machines have "
            "more memory than this one, set strategies.sharding.TASK_MEMORY_BYTES."), field="input_dim")


#: the cache each graph being built keeps (``strategies._compat.graph_cache``): ``(ids tensor, layout)`` ->
#: ``ShardedTable._route_unique``'s tensors, shared by its lookups
_ROUTES = "shared_routes"

@dataclasses.dataclass(frozen=True)
class ShardPlacement:
    """One shard of one table: where it is and what it holds."""

    table: str
    shard: int
    device: str
    rows: str
    num_rows: int
    bytes: int
    slot_bytes: int = 0


class ShardedTable(Trackable):
    """A ``[rows, dim]`` table held as shards, with sparse lookup.

    Use :meth:`create` (it picks shard devices); the constructor adopts
    existing shards and checks they fit ``layout``.
    """

    def __init__(self, shards: Sequence[tf.Variable], *, layout: ShardLayout, name: str) -> None:
        shards = tuple(shards)
        sizes = tuple(int(s.shape[0]) for s in shards)
        if sizes != layout.sizes or len({tuple(s.shape[1:]) for s in shards}) != 1:
            raise ShardingError((
                f"sharded table {name!r}: shard shapes {[tuple(s.shape) for s in shards]} do not fit "
                f"a {layout.partition} layout of {layout.rows} rows in {layout.num_shards} shards "
                f"(expected rows per shard: {list(layout.sizes)}). Create tables with ShardedTable.create."),
                field="shards")
        self._shards = shards
        self.layout = layout
        self.name = name

    def replace_shards(self, shards: Sequence[tf.Variable]) -> None:
        """Holds ``shards`` from now on (the same shapes: copies of the current ones, e.g. named for other clients)."""
        shards = tuple(shards)
        if [tuple(s.shape) for s in shards] != [tuple(s.shape) for s in self._shards]:
            raise ShardingError((
                f"sharded table {self.name!r}: replacement shards of shapes {[tuple(s.shape) for s in shards]} "
                f"for shards of shapes {[tuple(s.shape) for s in self._shards]}; pass a copy of each shard."),
                field="shards")
        self._shards = shards

    # ------------------------------------------------------------ creation
    @classmethod
    def create(
        cls,
        name: str,
        rows: int,
        dim: int,
        *,
        initializer: Callable[..., tf.Tensor],
        num_shards: int | None = None,
        devices: Sequence[str] | None = None,
        partition: str = "div",
        dtype: tf.dtypes.DType | str = tf.float32,
        min_shard_bytes: int | None = None,
    ) -> ShardedTable:
        """Creates the shards where they belong.

        Args:
            name: table name, also its checkpoint and slot prefix.
            rows, dim: the logical table is ``[rows, dim]``.
            initializer: ``initializer(shape, dtype=...)``, called once per shard; a
                seeded Keras initializer gets a distinct seed per shard (see
                ``strategies._sharding_init``).
            num_shards: how many shards. Without a strategy, default one per
                device, or 1. Under ParameterServerStrategy with no variable
                partitioner (the default), default one per ps for a table of at
                least ``min_shard_bytes``, else 1; a strategy partitioner decides
                by itself.
            devices: without a strategy, the device of each shard.
            partition: ``"div"`` or ``"mod"``.
            dtype: element type.
            min_shard_bytes: under parameter servers, tables this large or larger
                are split over every ps (None: ``AUTO_SHARD_BYTES``).
        """
        ShardLayout(partition, rows, 1)  # validates partition and rows early
        given = _from_source(name)
        if given is not None:  # another client's shards (a between-graph worker opens the chief's)
            shards, partition = given
            return cls(shards, layout=ShardLayout(partition, rows, len(shards)), name=name)
        strategy = _ps_strategy()
        if strategy is not None:
            shards = cls._create_under_ps(name, rows, dim, initializer, dtype, num_shards=num_shards,
                                          devices=devices, partition=partition, min_shard_bytes=min_shard_bytes)
        else:
            shards = cls._create_on_devices(name, rows, dim, initializer, dtype,
                                            num_shards=num_shards, devices=devices, partition=partition)
        table = cls(shards, layout=ShardLayout(partition, rows, len(shards)), name=name)
        logger.info("sharded table %r: %d x %d in %d shard(s) on %s", name, rows, dim,
                    len(shards), ", ".join(table.devices))
        return table

    @staticmethod
    def _create_under_ps(name, rows, dim, initializer, dtype, *, num_shards, devices, partition="div",
                         min_shard_bytes=None) -> list[tf.Variable]:
        if devices is not None:
            raise ShardingError((
                f"sharded table {name!r}: `devices` is {list(devices)!r}, but ParameterServerStrategy "
                "places variables itself. Drop `devices`: the table splits itself over the ps."), field="devices")
        strategy = _ps_strategy()
        partitioner, num_ps = pss_partitioning(strategy)
        nbytes = rows * dim * tf.as_dtype(dtype).size
        if partitioner is None:  # the table splits itself; the dense variables stay whole
            threshold = AUTO_SHARD_BYTES if min_shard_bytes is None else int(min_shard_bytes)
            count = num_shards if num_shards is not None else (num_ps if nbytes >= threshold else 1)
            # created one after the other, the shards land on the ps in turn (the strategy's round robin)
            return ShardedTable._create_on_devices(name, rows, dim, initializer, dtype, devices=None,
                                                   num_shards=max(min(count, rows), 1), partition=partition)
        value = tf.Variable(
            initial_value=functools.partial(_partition_aware(initializer), shape=[rows, dim], dtype=dtype),
            shape=[rows, dim], dtype=dtype, name=name,
        )
        shards = list(getattr(value, "variables", [value]))
        if num_shards is not None and num_shards != len(shards):
            logger.warning("sharded table %r: num_shards=%d ignored; the strategy's partitioner "
                           "made %d shard(s)", name, num_shards, len(shards))
        return shards

    @staticmethod
    def _create_on_devices(name, rows, dim, initializer, dtype, *, num_shards, devices,
                           partition) -> list[tf.Variable]:
        if devices is not None:
            try:
                devices = [resolve_device(d, field=f"devices[{i}]") for i, d in enumerate(devices)]
            except ValueError as exc:
                raise ShardingError(f"sharded table {name!r}: {exc}", field="devices") from exc
            if num_shards is not None and num_shards != len(devices):
                raise ShardingError((
                    f"sharded table {name!r}: `num_shards` is {num_shards} but {len(devices)} devices "
                    "were given (one shard per device). Pass matching values, or only one of them."),
                    field="num_shards")
        count = len(devices) if devices is not None else (num_shards or 1)
        layout = ShardLayout(partition, rows, count)
        _check_fits(name, dim, tf.as_dtype(dtype), layout)
        shards, offset = [], 0
        for i, size in enumerate(layout.sizes):
            shard_init = shard_initializer(initializer, full_shape=[rows, dim], shard_rows=size, offset=offset)
            offset += size
            with tf.device(devices[i]) if devices is not None else contextlib.nullcontext():
                shards.append(tf.Variable(
                    initial_value=functools.partial(shard_init, [size, dim], dtype=dtype),
                    shape=[size, dim], dtype=dtype, name=f"{name}/part_{i}",
                ))
        return shards

    def like(self, name: str, *, fill: float = 0.0) -> ShardedTable:
        """A table with this layout, filled with ``fill``: an optimizer slot.

        Each slot shard is created on (and updated next to) its table shard.
        """
        shards = []
        for i, shard in enumerate(self._shards):
            with colocated_with(shard):
                shards.append(tf.Variable(
                    initial_value=functools.partial(tf.fill, shard.shape, tf.constant(fill, shard.dtype)),
                    shape=shard.shape, dtype=shard.dtype, trainable=False, name=f"{name}/part_{i}",
                ))
        return ShardedTable(shards, layout=self.layout, name=name)

    # -------------------------------------------------------------- access
    @property
    def shards(self) -> tuple[tf.Variable, ...]:
        return self._shards

    @property
    def num_shards(self) -> int:
        return self.layout.num_shards

    @property
    def rows(self) -> int:
        return self.layout.rows

    @property
    def dim(self) -> int:
        return int(self._shards[0].shape[1])

    @property
    def dtype(self) -> tf.DType:
        return self._shards[0].dtype

    @property
    def partition(self) -> str:
        return self.layout.partition

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(s.device for s in self._shards)

    def lookup(self, ids: tf.Tensor | np.ndarray | Sequence[int]) -> tf.Tensor:
        """The rows of ``ids`` (any shape) as a ``ids.shape + [dim]`` tensor.

        Each distinct id is fetched once, from its own shard, on that shard's
        device; the gradient of each shard is an ``IndexedSlices`` over the
        rows it served. Tables of one layout looked up with the same ids tensor
        in one graph (a wide & deep model's two tables) share its de-duplication
        and routing: they are computed once.
        """
        ids = tf.convert_to_tensor(ids)
        unique, position, locals_, positions = self._route_unique(ids)
        if self.num_shards == 1:
            with tf.device(self._shards[0].device):
                rows = tf.gather(self._shards[0], unique)
        else:
            parts = []
            for variable, local in zip(self._shards, locals_, strict=False):
                with tf.device(variable.device):
                    parts.append(tf.gather(variable, local))
            rows = tf.dynamic_stitch(positions, parts)
        out = tf.gather(rows, position)
        return tf.reshape(out, tf.concat([tf.shape(ids), [self.dim]], axis=0))

    def _route_unique(self, ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor], list[tf.Tensor]]:
        """(distinct ids, each id's position among them, each shard's local rows and their positions)."""
        routes = None if tf.executing_eagerly() else graph_cache(ids.graph, _ROUTES)
        key = (ids.ref(), self.layout)
        if routes is not None:
            known = routes.get(key)
            if known is not None:
                return known
        flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
        checks = [
            tf.debugging.assert_non_negative(flat, message=self._range_message()),
            tf.debugging.assert_less(flat, tf.constant(self.rows, tf.int64), message=self._range_message()),
        ]
        with tf.control_dependencies(checks):
            unique, position = tf.unique(flat)
        routed: tuple[tf.Tensor, tf.Tensor, list[tf.Tensor], list[tf.Tensor]]
        if self.num_shards == 1:
            routed = (unique, position, [], [])
        else:
            shard, local = self.layout.route(unique)
            routed = (unique, position, tf.dynamic_partition(local, shard, self.num_shards),
                      tf.dynamic_partition(tf.range(tf.size(unique)), shard, self.num_shards))
        if routes is not None:
            routes[key] = routed
        return routed

    def _range_message(self) -> str:
        return (f"sharded table {self.name!r}: every id must be in [0, {self.rows}) (the table's rows); "
                "an id outside was looked up. Check the vocabulary size, or hash/clip ids into range.")

    def route(self, ids: tf.Tensor | np.ndarray | Sequence[int]) -> tuple[tf.Tensor, tf.Tensor]:
        """(shard, row inside the shard) of each id."""
        return self.layout.route(tf.cast(tf.convert_to_tensor(ids), tf.int64))

    def to_numpy(self) -> np.ndarray:
        """The whole table in row order. Materialises it: for tests and small tables."""
        out = np.zeros([self.rows, self.dim], self.dtype.as_numpy_dtype)
        for i, shard in enumerate(self._shards):
            out[self.layout.global_rows(i)] = shard.numpy()
        return out

    def assign_from(self, arrays: Sequence[np.ndarray], *, layout: ShardLayout) -> None:
        """Loads shards saved with ``layout`` (another shard count or partition is re-split).

        Raises:
            ShardingError: the saved table has another shape.
        """
        shapes = {tuple(np.shape(a))[1:] for a in arrays}
        if layout.rows != self.rows or shapes != {(self.dim,)}:
            raise ShardingError((
                f"sharded table {self.name!r}: the saved table has {layout.rows} rows of width "
                f"{sorted(shapes)} but this one has {self.rows} rows of width {self.dim}. "
                "Build the layer with the saved input_dim and output_dim."), field="weights")
        if layout == self.layout:
            for shard, array in zip(self._shards, arrays, strict=False):
                shard.assign(array)
            return
        full = np.empty([self.rows, self.dim], self.dtype.as_numpy_dtype)
        for k, array in enumerate(arrays):
            full[layout.global_rows(k)] = array
        for j, shard in enumerate(self._shards):
            shard.assign(full[self.layout.global_rows(j)])

    def placement(self, *, slots: Iterable[ShardedTable] = ()) -> list[ShardPlacement]:
        """One row per shard: device, rows held, bytes (and its slots' bytes)."""
        slots = list(slots)
        out = []
        for i, shard in enumerate(self._shards):
            size = int(np.prod(shard.shape)) * shard.dtype.size
            out.append(ShardPlacement(
                table=self.name, shard=i, device=shard.device, rows=self.layout.describe_rows(i),
                num_rows=int(shard.shape[0]), bytes=size,
                slot_bytes=sum(int(np.prod(s.shards[i].shape)) * s.dtype.size for s in slots),
            ))
        return out

    def _gather_saveables_for_checkpoint(self) -> dict[str, Callable[[str], SaveableObject | list[SaveableObject]]]:
        return table_saveables(self)

    def __repr__(self) -> str:
        return (f"ShardedTable(name={self.name!r}, rows={self.rows}, dim={self.dim}, "
                f"partition={self.partition!r}, devices={list(self.devices)})")
