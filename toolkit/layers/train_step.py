"""One training step for models with sharded embeddings.

The step splits the gradient in two: the dense variables go to the Keras
optimizer, the table shards (whose gradients are per-shard ``IndexedSlices``)
go to a sparse optimizer. It is a ``tf.function`` of ``(features, labels)``,
so it runs as is in a plain loop, under ``strategy.run``, or scheduled by a
``ClusterCoordinator`` on parameter-server workers.

Example:
    >>> with strategy.scope():                                   # doctest: +SKIP
    ...     model = recommender(...)
    ...     step = make_train_step(model, loss=keras.losses.BinaryCrossentropy(from_logits=True),
    ...                            optimizer=keras.optimizers.Adam(),
    ...                            sparse_optimizer=SparseAdam(0.01))
    >>> coordinator.schedule(step, args=(next(per_worker_iterator),))
"""
from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from strategies.sharding import ShardedTable, ShardingError, placement_report
from toolkit.layers.embedding import ShardedEmbedding, sparse_training
from toolkit.layers.sparse_optimizers import SparseOptimizer

__all__ = ["make_train_step", "model_placement_report", "sharded_tables"]


def sharded_tables(model: Any) -> list[ShardedTable]:
    """The tables of every built :class:`ShardedEmbedding` in ``model``.

    Raises:
        ShardingError: two tables share a name (their slots and checkpoint
            entries would collide), or a sharded layer is not built yet.
    """
    tables: dict[str, ShardedTable] = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if not isinstance(layer, ShardedEmbedding):
            continue
        if layer.table is None:
            raise ShardingError("model", (
                f"ShardedEmbedding {layer.name!r} is not built. Build the model first "
                "(functional models are built on construction; otherwise call it on a batch)."))
        if layer.name in tables:
            raise ShardingError("model", (
                f"two ShardedEmbedding layers are named {layer.name!r}. Give each a unique name=."))
        tables[layer.name] = layer.table
    return list(tables.values())


def model_placement_report(model: Any, *, sparse_optimizer: SparseOptimizer | None = None) -> str:
    """Which shard of each table lives on which device (and its slots' size)."""
    slots = sparse_optimizer.slots_by_table() if sparse_optimizer is not None else None
    return placement_report(sharded_tables(model), slots=slots)


def _check_dense_unsharded(variables: list[Any]) -> None:
    """Keras optimizers fail on sharded variables: say which one and what to do."""
    for variable in variables:
        if hasattr(getattr(variable, "value", None), "variables"):  # a ShardedVariable inside
            raise ShardingError("partitioner", (
                f"dense variable {variable.path!r} {tuple(variable.shape)} was sharded by the strategy's "
                "variable partitioner, and Keras optimizers cannot update sharded variables. Shard only "
                "the embedding tables: use partitioner='min_size' with partitioner_args="
                "{'min_shard_bytes': <more than your largest dense variable>, 'max_shards': <number of ps>}."))


def make_train_step(
    model: Any,
    *,
    loss: Callable[[Any, Any], Any],
    optimizer: Any,
    sparse_optimizer: SparseOptimizer,
) -> Callable[[Any, Any], tf.Tensor]:
    """A ``tf.function`` ``step(features, labels) -> loss`` training ``model``.

    Builds both optimizers now (call it under the strategy's scope, so slots
    are created where the strategy wants them).

    Args:
        model: a built Keras 3 model, with or without sharded embeddings.
        loss: ``loss(labels, predictions)`` returning a scalar (a Keras loss).
        optimizer: a Keras optimizer for the dense variables.
        sparse_optimizer: updates the sharded tables.
    """
    tables = sharded_tables(model)
    sparse_optimizer.build(tables)
    dense = list(model.trainable_variables)
    _check_dense_unsharded(dense)
    optimizer.build(dense)
    shards = [shard for table in tables for shard in table.shards]

    @tf.function
    def step(features: Any, labels: Any) -> tf.Tensor:
        with sparse_training(), tf.GradientTape() as tape:
            predictions = model(features, training=True)
            value = loss(labels, predictions)
            if model.losses:
                value += tf.add_n(model.losses)
        gradients = tape.gradient(value, dense + shards)
        optimizer.apply_gradients(zip(gradients[: len(dense)], dense))
        sparse = iter(gradients[len(dense):])
        sparse_optimizer.apply([(t, [next(sparse) for _ in t.shards]) for t in tables])
        return value

    return step
