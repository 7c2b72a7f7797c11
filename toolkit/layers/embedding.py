"""A Keras 3 embedding layer whose table is sharded across devices or ps tasks.

Use it where ``keras.layers.Embedding`` would hold a table too big for one
machine. Its table is a :class:`strategies.sharding.ShardedTable`, kept out of
``model.trainable_variables`` on purpose: Keras optimizers cannot update
sharded variables. Train it with :func:`toolkit.layers.make_train_step`,
which hands the dense variables to the Keras optimizer and the table shards
to a sparse optimizer. Save it with ``tf.train.Checkpoint`` (the table is a
checkpoint dependency of the layer; Keras ``.weights.h5`` files do not hold it).

Example:
    >>> ids = keras.Input((), dtype="int64")
    >>> vectors = ShardedEmbedding(1_000, 32, name="items")(ids)
    >>> vectors.shape
    (None, 32)
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np

from strategies.sharding import PARTITIONS, ShardedTable, ShardingError, ShardLayout
from tf_config.checks import check_int
from toolkit._compat.keras import reraise_unchanged

_PARTITION_CODES = sorted(PARTITIONS)  # partition name <-> int, for Keras weight files
_SPARSE_STEP = threading.local()


@contextlib.contextmanager
def sparse_training() -> Iterator[None]:
    """Marks a training step that updates sharded tables (``make_train_step`` does).

    Outside it, a trainable ``ShardedEmbedding`` called with ``training=True``
    raises: the loop would train the dense layers and silently leave the
    table as initialised, since Keras optimizers only see
    ``model.trainable_variables``.
    """
    previous = getattr(_SPARSE_STEP, "active", False)
    _SPARSE_STEP.active = True
    try:
        yield
    finally:
        _SPARSE_STEP.active = previous

__all__ = ["ShardedEmbedding", "sparse_training"]


def _positive_int(name: str, value: Any) -> int:
    return check_int(value, field=name, error=ShardingError, owner="ShardedEmbedding", fix="")


@keras.saving.register_keras_serializable(package="tfdist")
class ShardedEmbedding(keras.layers.Layer):
    """Maps integer ids in ``[0, input_dim)`` to ``output_dim`` vectors.

    Args:
        input_dim: size of the id space (rows of the table).
        output_dim: width of each vector.
        num_shards: without a strategy, number of shards (default: one per
            device, else 1). Under ParameterServerStrategy: one per ps when the
            table holds at least ``min_shard_bytes`` (else 1), unless the strategy
            has a variable partitioner, which then decides.
        devices: without a strategy, the device of each shard, e.g.
            ``["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]``.
        partition: ``"div"`` (contiguous ranges; checkpoints restore into any
            shard count) or ``"mod"`` (id ``i`` in shard ``i % num_shards``).
        embeddings_initializer: a Keras initializer or its name.
        min_shard_bytes: under parameter servers, the size from which the table
            is split over every ps (None: ``strategies.sharding.AUTO_SHARD_BYTES``, 1 MiB).
    """

    # device maps leave this layer's variables where it put them
    places_own_variables = True

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        *,
        num_shards: int | None = None,
        devices: Sequence[str] | None = None,
        partition: str = "div",
        embeddings_initializer: Any = "uniform",
        min_shard_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_dim = _positive_int("input_dim", input_dim)
        self.output_dim = _positive_int("output_dim", output_dim)
        self.num_shards = None if num_shards is None else _positive_int("num_shards", num_shards)
        self.devices = None if devices is None else tuple(devices)
        if partition not in PARTITIONS:
            raise ShardingError((
                f"ShardedEmbedding `partition` is {partition!r}; expected one of {sorted(PARTITIONS)}."),
                field="partition")
        self.partition = partition
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.min_shard_bytes = None if min_shard_bytes is None else _positive_int("min_shard_bytes", min_shard_bytes)
        self.table: ShardedTable | None = None

    def build(self, input_shape: Any = None) -> None:
        self.table = ShardedTable.create(
            self.name,
            self.input_dim,
            self.output_dim,
            initializer=self.embeddings_initializer,
            num_shards=self.num_shards,
            devices=self.devices,
            partition=self.partition,
            dtype=self.variable_dtype,
            min_shard_bytes=self.min_shard_bytes,
        )

    def call(self, inputs: Any, training: Any = None) -> Any:
        if training is True and self.trainable and not getattr(_SPARSE_STEP, "active", False):
            error = ShardingError((
                f"ShardedEmbedding {self.name!r} is being trained by a loop that cannot update its table "
                "(Keras optimizers only see model.trainable_variables, so the table would silently stay "
                "as initialised). Train with toolkit.layers.make_train_step(model, loss=..., optimizer=..., "
                "sparse_optimizer=SparseAdam()), or set layer.trainable = False to keep the table frozen."),
                field="training")
            raise reraise_unchanged(error)  # Keras would otherwise re-raise it as a RuntimeError
        assert self.table is not None  # Keras builds a layer before its first call
        return self.table.lookup(inputs)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape) + (self.output_dim,)

    @property
    def placed_variables(self) -> tuple:
        """The table shards (Keras does not list them among the layer's weights)."""
        return () if self.table is None else self.table.shards

    def save_own_variables(self, store: Any) -> None:
        """Keras weight files: the layout, then one entry per shard."""
        if self.table is None:
            return
        layout = self.table.layout
        store["layout"] = np.array([layout.rows, self.table.dim, layout.num_shards,
                                    _PARTITION_CODES.index(layout.partition)], dtype=np.int64)
        for i, shard in enumerate(self.table.shards):
            store[f"shard_{i}"] = shard.numpy()

    def load_own_variables(self, store: Any) -> None:
        """Loads shards saved by :meth:`save_own_variables`, re-split if the layout differs."""
        rows, _, num_shards, code = (int(x) for x in np.asarray(store["layout"]))
        layout = ShardLayout(_PARTITION_CODES[code], rows, num_shards)
        assert self.table is not None  # Keras builds a layer before loading its weights
        self.table.assign_from([np.asarray(store[f"shard_{i}"]) for i in range(num_shards)], layout=layout)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            input_dim=self.input_dim,
            output_dim=self.output_dim,
            num_shards=self.num_shards,
            devices=None if self.devices is None else list(self.devices),
            partition=self.partition,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
            min_shard_bytes=self.min_shard_bytes,
        )
        return config
