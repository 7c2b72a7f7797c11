"""Where a sharded table's shards come from and go: ps devices, the current ParameterServerStrategy, a
``shard_source`` that hands a between-graph worker the chief's shards, colocation, and the initializer the
strategy calls once per shard. ``strategies.sharding`` re-exports the public names."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import tensorflow as tf

from strategies._sharding_errors import ShardingError
from strategies._sharding_init import shard_initializer

if TYPE_CHECKING:
    from tf_config import TFConfig

__all__ = ["ShardSource", "colocated_with", "has_shard_source", "ps_devices", "shard_source"]


def ps_devices(cfg: TFConfig) -> list[str]:
    """The CPU device of every ps task of a ``tf_config.TFConfig``."""
    return [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(cfg.num_ps)]


def _ps_strategy() -> tf.distribute.ParameterServerStrategy | None:
    """The current ParameterServerStrategy, None for the default strategy."""
    if not tf.distribute.has_strategy():
        return None
    strategy = tf.distribute.get_strategy()
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return strategy
    raise ShardingError((
        f"sharded tables work without a strategy or under ParameterServerStrategy; the current "
        f"strategy is {type(strategy).__name__}. Build the model under "
        "make_strategy('parameter_server', ..., partitioner=...) or outside any strategy scope."), field="strategy")


#: where ``shard_source`` keeps its function, per thread
_SOURCE = threading.local()

#: ``source(table name) -> (shards, partition)`` or None (create the table as usual)
ShardSource = Callable[[str], "tuple[list[tf.Variable], str] | None"]


@contextlib.contextmanager
def shard_source(source: ShardSource) -> Iterator[None]:
    """Inside, ``ShardedTable.create`` adopts the shards ``source(name)`` returns instead of creating them.

    A between-graph worker builds the model in its own graph on the chief's tables this way.
    """
    previous = getattr(_SOURCE, "source", None)
    _SOURCE.source = source
    try:
        yield
    finally:
        _SOURCE.source = previous


def _from_source(name: str) -> tuple[list[tf.Variable], str] | None:
    source = getattr(_SOURCE, "source", None)
    return None if source is None else source(name)


def has_shard_source(name: str) -> bool:
    """Whether the active ``shard_source`` holds the table ``name``."""
    return _from_source(name) is not None


def colocated_with(variable: tf.Variable) -> contextlib.AbstractContextManager[None]:
    """A scope that creates variables on ``variable``'s device.

    Under ParameterServerStrategy an explicit ``tf.device`` is overridden by
    its round-robin placement; only the strategy's colocation is honoured.
    """
    strategy = _ps_strategy()
    if strategy is not None:
        return strategy.extended.colocate_vars_with(variable)
    return tf.device(variable.device)


def _partition_aware(initializer: Callable[..., tf.Tensor]) -> Callable[..., tf.Tensor]:
    """An initializer ParameterServerStrategy can call once per shard.

    Without ``partition_shape`` the strategy would build the *whole* table on
    the coordinator and slice it, which is what sharding is meant to avoid.
    """

    def initial(shape: Sequence[int], dtype: tf.dtypes.DType, partition_shape: Sequence[int] | None = None,
                partition_offset: Sequence[int] | None = None) -> tf.Tensor:
        shard_shape = list(partition_shape if partition_shape is not None else shape)
        offset = int(partition_offset[0]) if partition_offset is not None else 0
        shard_init = shard_initializer(initializer, full_shape=list(shape), shard_rows=int(shard_shape[0]),
                                       offset=offset)
        return shard_init(shard_shape, dtype=dtype)

    return initial
