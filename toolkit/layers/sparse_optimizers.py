"""Optimizers for sharded tables: row-sparse SGD, Adagrad and Adam.

Keras 3 optimizers cannot update a ``ShardedVariable`` and, on a plain
embedding, Adam turns the sparse gradient dense and rewrites every row of the
table and of both slots each step. These optimizers take the per-shard
``IndexedSlices`` a :class:`~strategies.sharding.ShardedTable` lookup yields
and touch only the rows that were looked up:

* the slot tables (Adagrad accumulator, Adam moments) have the table's layout,
  each slot shard on its table shard's device (never on the coordinator);
* the arithmetic runs on the shard's device, so only the looked-up rows travel;
* the step counter is a plain ``tf.Variable`` on a ps with ``assign_add``
  (Keras' counter loses increments under asynchronous ps training).

On rows that are looked up every step the updates equal Keras' (same formulas
and defaults); rows not looked up keep their slots unchanged ("lazy" Adam).
Slots and rows are updated by adding deltas, never by read-modify-write, so a
worker's stale read no longer overwrites another worker's moment update, and each
add runs under the variable's exclusive lock (``ResourceScatterNdAdd``; a plain
``scatter_add`` takes a shared lock on float rows, and two adds that land on the
same row at the same instant could lose one).

Example:
    >>> opt = make_sparse_optimizer("adam", learning_rate=0.01)   # doctest: +SKIP
    >>> opt.build(tables)  # doctest: +SKIP
    >>> opt.apply([(table, shard_gradients)])  # doctest: +SKIP
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from strategies import _native as native
from strategies.sharding import ShardedTable, ShardingError, colocated_with
from tf_config.checks import check_number
from toolkit.layers._row_exchange import exchange_rows

__all__ = ["SPARSE_OPTIMIZERS", "SparseAdagrad", "SparseAdam", "SparseOptimizer", "SparseSGD",
           "make_sparse_optimizer"]

logger = logging.getLogger(__name__)


def _positive(name: str, value: Any, owner: str) -> float:
    return float(check_number(value, field=name, error=ShardingError, owner=owner, example=0.01))


def _unique_already(indices: tf.Tensor) -> bool:
    """Whether traced ``indices`` are a table lookup's own rows, distinct by construction.

    ``ShardedTable.lookup`` gathers each distinct id once (``Unique``, then ``DynamicPartition``
    by shard), and the gather's gradient reshapes those rows; a table looked up twice gets the
    concatenation of two such lists instead, which may repeat rows.
    """
    op = getattr(indices, "op", None)  # eager tensors have none
    while op is not None and op.type in ("Reshape", "Identity", "Cast"):
        op = op.inputs[0].op
    return op is not None and op.type in ("Unique", "DynamicPartition")


def _dedupe(gradient: tf.IndexedSlices) -> tuple[tf.Tensor, tf.Tensor]:
    """(unique rows, summed gradient per row): an id seen twice updates once."""
    if _unique_already(gradient.indices):  # one lookup's rows: already distinct, nothing to sum
        return tf.cast(gradient.indices, tf.int64), gradient.values
    rows, position = tf.unique(tf.cast(gradient.indices, tf.int64))
    values = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(rows)[0])
    return rows, values


def _add_rows(variable: tf.Variable, rows: tf.Tensor, deltas: tf.Tensor) -> None:
    """``variable[rows] += deltas`` under the variable's exclusive lock.

    ``ResourceScatterNdAdd`` locks the variable (its ``use_locking`` defaults to True);
    ``scatter_add`` takes a shared lock on float rows, and two adds to one row at the
    same instant can then lose one.
    """
    variable.scatter_nd_add(tf.expand_dims(rows, 1), deltas)


class SparseOptimizer(tf.Module):
    """Base class: slots per table, one update per looked-up row.

    Subclasses name their slots (and initial values) in :meth:`_slot_fills`
    and implement :meth:`_update_rows`.

    Attributes:
        learning_rate: step size.
        iterations: steps applied (a ``tf.Variable`` on the first shard's device).
        slots: ``{table name: {slot name: ShardedTable}}``, checkpointed with
            the optimizer.
    """

    #: True when a step updates rows that were not looked up (dense Adam): shards with no gradient still step
    touches_every_row: bool = False

    def __init__(self, learning_rate: float, *, name: str) -> None:
        super().__init__(name=name)
        self.learning_rate = _positive("learning_rate", learning_rate, type(self).__name__)
        self.iterations: tf.Variable | None = None
        self.slots: dict[str, dict[str, ShardedTable]] = {}

    def build(self, tables: Iterable[ShardedTable]) -> SparseOptimizer:
        """Creates slot tables next to each table's shards (call under the strategy scope)."""
        tables = list(tables)
        for table in tables:
            if table.name not in self.slots:
                self.slots[table.name] = {
                    slot: table.like(f"{self.name}/{table.name}/{slot}", fill=fill)
                    for slot, fill in self._slot_fills().items()
                }
        if self.iterations is None and tables:
            with colocated_with(tables[0].shards[0]):
                self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{self.name}/iterations")
        return self

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments: ``type(opt)(**opt.get_config())`` is the same optimizer, without state."""
        return {"learning_rate": self.learning_rate, "name": self.name}

    def slots_by_table(self) -> dict[str, list[ShardedTable]]:
        """Slot tables by table name, as :func:`strategies.sharding.placement_report` wants."""
        return {name: list(slots.values()) for name, slots in self.slots.items()}

    def apply(self, tables_and_gradients: Iterable[tuple[ShardedTable, Sequence[Any]]]) -> None:
        """Applies one step: ``[(table, [gradient of each shard or None]), ...]``."""
        if self.iterations is None:
            raise ShardingError(f"{type(self).__name__}.apply called before build(tables). "
                                "Call build(tables) once, under the strategy scope, before training.", field="build")
        step = tf.cast(self.iterations + 1, tf.float32)
        tables_and_gradients = [(table, list(gradients)) for table, gradients in tables_and_gradients]
        # tables looked up with the same ids: their row gradients travel to each ps as one tensor
        moved = iter(exchange_rows([(shard, gradient) for table, gradients in tables_and_gradients
                                    for shard, gradient in zip(table.shards, gradients, strict=False)]))
        for table, gradients in tables_and_gradients:
            slots = self.slots.get(table.name)
            if slots is None:
                raise ShardingError(f"{type(self).__name__} has no slots for table {table.name!r}. "
                                    "Pass every table to build(tables) before training.", field="build")
            if all(gradient is None for gradient in gradients):
                # traced once: a table the loss does not reach is not trained, and says so
                logger.warning("%s: table %r got no gradient in this step (the loss does not depend on it, or its "
                               "shards are not watched); it is not updated", type(self).__name__, table.name)
            for i, (shard, gradient) in enumerate(zip(table.shards, gradients, strict=False)):
                exchanged = next(moved)
                if gradient is None and not self.touches_every_row:
                    continue
                with tf.device(shard.device):
                    if gradient is None:  # no row of this shard was looked up: an empty update
                        rows, values = tf.zeros([0], tf.int64), tf.zeros([0, *shard.shape[1:]], shard.dtype)
                    elif exchanged is not None:  # one lookup's routed ids (distinct), with the other tables'
                        rows, values = exchanged
                    else:
                        rows, values = _dedupe(gradient)
                    shard_slots = {name: slot.shards[i] for name, slot in slots.items()}
                    self._update_rows(shard, rows, tf.cast(values, shard.dtype), shard_slots, step)
        self.iterations.assign_add(1)

    def _slot_fills(self) -> Mapping[str, float]:
        """Slot name -> initial value of every row."""
        return {}

    def _update_rows(self, shard: tf.Variable, rows: tf.Tensor, grad: tf.Tensor,
                     slots: Mapping[str, tf.Variable], step: tf.Tensor) -> None:
        raise NotImplementedError


class SparseSGD(SparseOptimizer):
    """Plain SGD on the looked-up rows."""

    def __init__(self, learning_rate: float = 0.01, *, name: str = "sparse_sgd") -> None:
        super().__init__(learning_rate, name=name)

    def _update_rows(self, shard, rows, grad, slots, step) -> None:
        _add_rows(shard, rows, -self.learning_rate * grad)


class SparseAdagrad(SparseOptimizer):
    """Adagrad with Keras' defaults (accumulator starts at 0.1, epsilon 1e-7)."""

    def __init__(self, learning_rate: float = 0.001, *, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, name: str = "sparse_adagrad") -> None:
        super().__init__(learning_rate, name=name)
        self.initial_accumulator_value = _positive(
            "initial_accumulator_value", initial_accumulator_value, "SparseAdagrad")
        self.epsilon = _positive("epsilon", epsilon, "SparseAdagrad")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.epsilon}

    def _slot_fills(self) -> Mapping[str, float]:
        return {"accumulator": self.initial_accumulator_value}

    def _update_rows(self, shard, rows, grad, slots, step) -> None:
        # TensorFlow's fused kernel (what TF1's AdagradOptimizer ran): one op on the ps, under both variables'
        # locks, instead of a scatter, a gather and a second scatter. Its epsilon is outside the square root
        # (Keras': inside); with the accumulator at least initial_accumulator_value, they differ by < 1e-6.
        # Where the ps was probed for tfdist's native kernel (between-graph steps), that kernel: the same
        # update bit for bit, about a quarter of the CPU per row (strategies._native).
        apply = native.sparse_apply_adagrad if native.usable_on(shard.device) else functools.partial(
            tf.raw_ops.ResourceSparseApplyAdagradV2, use_locking=True)
        apply(var=shard.handle, accum=slots["accumulator"].handle, lr=tf.constant(self.learning_rate, grad.dtype),
              epsilon=tf.constant(self.epsilon, grad.dtype), grad=grad, indices=rows)


class SparseAdam(SparseOptimizer):
    """Adam with Keras' formulas and defaults.

    ``lazy=True`` (the default) updates the looked-up rows only: a row's moments decay in the steps that
    look it up. ``lazy=False`` is Keras' dense Adam: every step decays both moments of *every* row and
    moves every row, shard by shard on each shard's device (no row travels, but each step rewrites whole
    tables and slots, which costs in proportion to the table, not the batch).
    """

    def __init__(self, learning_rate: float = 0.001, *, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, lazy: bool = True, name: str = "sparse_adam") -> None:
        super().__init__(learning_rate, name=name)
        self.lazy = bool(lazy)
        self.touches_every_row = not self.lazy
        for key, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ShardingError(f"SparseAdam `{key}` is {value!r}; expected a number in [0, 1), e.g. 0.9.",
                    field=key)
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
        self.epsilon = _positive("epsilon", epsilon, "SparseAdam")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                "lazy": self.lazy}

    def _slot_fills(self) -> Mapping[str, float]:
        return {"m": 0.0, "v": 0.0}

    def _update_rows(self, shard, rows, grad, slots, step) -> None:
        m, v = slots["m"], slots["v"]
        alpha = self.learning_rate * tf.sqrt(1 - self.beta_2 ** step) / (1 - self.beta_1 ** step)
        if not self.lazy:  # Keras' dense maths: decay all rows, add the looked-up gradients, move all rows
            m.assign(m * self.beta_1)
            v.assign(v * self.beta_2)
            _add_rows(m, rows, grad * (1 - self.beta_1))
            _add_rows(v, rows, tf.square(grad) * (1 - self.beta_2))
            shard.assign_sub(m * tf.cast(alpha, shard.dtype) / (tf.sqrt(v) + self.epsilon))
            return
        # Add deltas instead of writing new values: under asynchronous workers a gather -> compute ->
        # scatter_update lets one worker overwrite another's moment update; each locked add is atomic.
        m_rows = tf.gather(m, rows)
        v_rows = tf.gather(v, rows)
        _add_rows(m, rows, (grad - m_rows) * (1 - self.beta_1))
        _add_rows(v, rows, (tf.square(grad) - v_rows) * (1 - self.beta_2))
        m_new = tf.gather(m, rows)  # after the adds (ops on one variable run in program order)
        v_new = tf.gather(v, rows)
        _add_rows(shard, rows, -m_new * tf.cast(alpha, shard.dtype) / (tf.sqrt(v_new) + self.epsilon))


# optimizer name -> class
SPARSE_OPTIMIZERS: dict[str, Callable[..., SparseOptimizer]] = {
    "adagrad": SparseAdagrad,
    "adam": SparseAdam,
    "sgd": SparseSGD,
}


def make_sparse_optimizer(name: str, **kwargs: Any) -> SparseOptimizer:
    """``make_sparse_optimizer("adam", learning_rate=0.01)``; unknown names list the valid ones."""
    builder = SPARSE_OPTIMIZERS.get(name)
    if builder is None:
        raise ShardingError((
            f"sparse optimizer `name` is {name!r}; expected one of {sorted(SPARSE_OPTIMIZERS)}. "
            "Pick one of those names."), field="name")
    return builder(**kwargs)
