"""The engine's training step for models with sharded embeddings.

``ShardedTrainStep`` plugs into ``toolkit.fit`` through the ``TrainStep`` seam;
``make_train_step`` wraps it for hand-written loops. The step splits the
gradient in two: the dense variables go to the Keras optimizer, the table
shards (whose gradients are per-shard ``IndexedSlices``) go to a sparse
optimizer. It is a ``tf.function`` of ``(features, labels)``,
so it runs as is in a plain loop, under ``strategy.run``, or scheduled by a
``ClusterCoordinator`` on parameter-server workers.

Example:
    >>> with strategy.scope():                                   # doctest: +SKIP
    ...     model = recommender(...)
    ...     step = make_train_step(model, loss=keras.losses.BinaryCrossentropy(from_logits=True),
    ...                            optimizer=keras.optimizers.Adam(),
    ...                            sparse_optimizer=SparseAdam(0.01))
    >>> coordinator.schedule(step, args=(next(per_worker_iterator),))  # doctest: +SKIP
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from strategies.sharding import ShardedTable, ShardingError, placement_report
from toolkit._compat.keras import child_layers
from toolkit.layers.embedding import ShardedEmbedding, sparse_training
from toolkit.layers.keras_embedding import SHARDED_TABLE, is_sharded_keras_embedding
from toolkit.layers.keras_sparse import sparse_optimizer_for
from toolkit.layers.sparse_optimizers import SPARSE_OPTIMIZERS, SparseAdam, SparseOptimizer
from toolkit.training.config import TrainingError
from toolkit.training.extensions import register_export_state, register_model_step
from toolkit.training.state import TrainState
from toolkit.training.step import Forward, ResolvedMetric, TrainStep, after_updates, make_forward

logger = logging.getLogger(__name__)

#: an exported model that gathers a table this large whole gets a warning
_EXPORT_WARN_BYTES = 256 << 20

__all__ = ["ShardedTrainStep", "has_sharded_tables", "make_train_step", "model_placement_report", "sharded_tables"]


def sharded_tables(model: Any) -> list[ShardedTable]:
    """The tables of every built :class:`ShardedEmbedding` in ``model``.

    Raises:
        ShardingError: two tables share a name (their slots and checkpoint
            entries would collide), or a sharded layer is not built yet.
    """
    tables: dict[str, ShardedTable] = {}
    for layer in child_layers(model, recursive=True):
        if is_sharded_keras_embedding(layer):
            if layer.name in tables:
                raise ShardingError(f"two embedding layers are named {layer.name!r}. Give each a unique name=.",
                                    field="model")
            tables[layer.name] = getattr(layer, SHARDED_TABLE)
            continue
        if not isinstance(layer, ShardedEmbedding):
            continue
        if layer.table is None:
            raise ShardingError((
                f"ShardedEmbedding {layer.name!r} is not built. Build the model first "
                "(functional models are built on construction; otherwise call it on a batch)."), field="model")
        if layer.name in tables:
            raise ShardingError((
                f"two ShardedEmbedding layers are named {layer.name!r}. Give each a unique name=."), field="model")
        tables[layer.name] = layer.table
    return list(tables.values())


def sharded_tables_of(layer: Any) -> ShardedTable:
    """The table of one sharded layer (``ShardedEmbedding`` or a Keras ``Embedding`` built under ps)."""
    return getattr(layer, SHARDED_TABLE) if is_sharded_keras_embedding(layer) else layer.table


def has_sharded_tables(model: Any) -> bool:
    """True if ``model`` holds a :class:`ShardedEmbedding` (so ``fit`` trains it with ``ShardedTrainStep``)."""
    return any(isinstance(layer, ShardedEmbedding) or is_sharded_keras_embedding(layer)
               for layer in child_layers(model, recursive=True))


def model_placement_report(model: Any, *, sparse_optimizer: SparseOptimizer | None = None) -> str:
    """Which shard of each table lives on which device (and its slots' size)."""
    slots = sparse_optimizer.slots_by_table() if sparse_optimizer is not None else None
    return placement_report(sharded_tables(model), slots=slots)


def _check_dense_unsharded(variables: list[Any]) -> None:
    """Keras optimizers fail on sharded variables: say which one and what to do."""
    for variable in variables:
        if hasattr(getattr(variable, "value", None), "variables"):  # a ShardedVariable inside
            raise ShardingError((
                f"dense variable {variable.path!r} {tuple(variable.shape)} was sharded by the strategy's "
                "variable partitioner, and Keras optimizers cannot update sharded variables. Shard only "
                "the embedding tables: use partitioner='min_size' with partitioner_args="
                "{'min_shard_bytes': <more than your largest dense variable>, 'max_shards': <number of ps>}."),
                field="partitioner")


def _check_shards_trainable(model: Any) -> None:
    """A trainable layer whose shards are not trainable variables would get no gradient, and never train."""
    for layer in child_layers(model, recursive=True):
        sharded = is_sharded_keras_embedding(layer)
        table = getattr(layer, SHARDED_TABLE, None) if sharded else getattr(layer, "table", None)
        if isinstance(table, ShardedTable) and layer.trainable:
            frozen = [shard.name for shard in table.shards if not shard.trainable]
            if frozen:
                raise ShardingError((
                    f"{type(layer).__name__} {layer.name!r} ({table.rows} x {table.dim}) is trainable but its "
                    f"table shards {frozen} were created as non-trainable variables, so the tape would give them no "
                    "gradient and the table would silently stay as initialised. A variable creator around the model's "
                    "construction turned them non-trainable: create them with trainable=True, or set "
                    "layer.trainable = False to keep the table frozen on purpose."), field="model")


def _one_row_after(shard: tf.Variable) -> tf.Tensor:
    with tf.device(shard.device):
        return tf.gather(shard, tf.zeros([1], tf.int64))


class ShardedTrainStep(TrainStep):
    """The engine's train step for models with sharded embedding tables.

    It plugs into ``toolkit.fit``'s loop through the ``TrainStep`` seam (``fit``
    picks it for any model with a :class:`ShardedEmbedding`): the tape also
    watches the table shards, the dense gradients go to the Keras optimizer and
    the per-shard ``IndexedSlices`` to ``sparse_optimizer``, whose slots are
    checkpointed with the model. The loss is averaged over the global batch,
    as in every engine step, so gradients summed over replicas are right.

    Args:
        state, forward, metrics, global_batch_size: as for ``TrainStep``.
        sync: must be None: synchronous replicas aggregate dense gradients only.
        sparse_optimizer: updates the tables (default: the compiled Keras optimizer's own maths,
            row-sparse: ``toolkit.layers.keras_sparse.sparse_optimizer_for``). Built
            here, so construct the step under the strategy's scope.
    """

    def __init__(self, state: TrainState, forward: Forward, metrics: Mapping[str, ResolvedMetric], *,
                 global_batch_size: int | None = None, sync: Any = None,
                 sparse_optimizer: SparseOptimizer | None = None) -> None:
        if sync is not None:
            raise TrainingError(
                "`sync` is a SyncConfig but the model has sharded embedding tables; synchronous replicas "
                "aggregate dense gradients only. Train it asynchronously (drop sync=).",
                field="sync")
        super().__init__(state, forward, metrics, global_batch_size=global_batch_size)
        self.tables = sharded_tables(state.model)
        self.dense = list(state.model.trainable_variables)
        _check_dense_unsharded(self.dense)
        if sparse_optimizer is None:
            sparse_optimizer = sparse_optimizer_for(state.optimizer, self.tables) if self.tables else SparseAdam()
        self.sparse_optimizer = sparse_optimizer
        self.sparse_optimizer.build(self.tables)
        self.shards = [shard for table in self.tables for shard in table.shards]
        _check_shards_trainable(state.model)
        state.extras.setdefault("sparse_optimizer", self.sparse_optimizer)

    #: False on a between-graph worker: nothing is read back after the update (the worker's loop
    #: counts a step after all its stateful ops)
    read_back: bool = True

    def variables(self) -> list[Any]:
        return [*self.dense, *self.shards]

    def between_graph_spec(self, named: Any) -> dict[str, Any]:
        """What a between-graph worker needs beyond model and optimizer (the chief's manifest entries):
        each table's shards, and the sparse optimizer's class, config, slots and step counter."""
        sparse = self.sparse_optimizer
        return {
            "tables": {t.name: {"partition": t.partition, "shards": [named.describe(s) for s in t.shards]}
                       for t in self.tables},
            "step": {"class": type(sparse).__name__, "config": sparse.get_config(),
                     "iterations": named.describe(sparse.iterations),
                     "slots": {table: {slot: [named.describe(s) for s in slot_table.shards]
                                       for slot, slot_table in slots.items()}
                               for table, slots in sparse.slots.items()}},
        }

    @classmethod
    def for_worker(cls, state: TrainState, forward: Forward, metrics: Mapping[str, ResolvedMetric], *,
                   global_batch_size: int | None, spec: Mapping[str, Any],
                   open_variable: Callable[..., Any]) -> ShardedTrainStep:
        """The chief's step rebuilt on a between-graph worker, its sparse optimizer on the chief's slots."""
        builder = {type_.__name__: type_ for type_ in SPARSE_OPTIMIZERS.values()}.get(spec["class"])
        if builder is None:
            raise TrainingError(f"between-graph steps: the chief's sparse optimizer {spec['class']!r} is not one "
                                f"this worker knows ({sorted(SPARSE_OPTIMIZERS)}); every task must run the same "
                                "code.", field="train_step")
        sparse = builder(**spec["config"])
        tables = {t.name: t for t in sharded_tables(state.model)}
        sparse.slots = {name: {slot: ShardedTable([open_variable(s) for s in shards], layout=tables[name].layout,
                                                  name=f"{sparse.name}/{name}/{slot}")
                               for slot, shards in slots.items()}
                        for name, slots in spec["slots"].items()}
        sparse.iterations = open_variable(spec["iterations"])
        step = cls(state, forward, metrics, global_batch_size=global_batch_size, sparse_optimizer=sparse)
        step.read_back = False
        return step

    def tape_scope(self) -> Any:
        return sparse_training()

    def apply(self, gradients: Sequence[Any], variables: Sequence[Any], *, step: Any = None) -> list[tf.Tensor]:
        count = len(self.dense)
        self.optimizer.apply_gradients(zip(gradients[:count], variables[:count], strict=False))
        if self.tables:
            sparse = iter(gradients[count:])
            self.sparse_optimizer.apply([(t, [next(sparse) for _ in t.shards]) for t in self.tables])
        if not self.read_back:
            return []
        # one row of each shard, read after its updates (ops on one variable run in program order): reading
        # whole shards, as after_updates does for dense variables, would copy every table each step
        return [*after_updates(variables[:count]), *(_one_row_after(shard) for shard in self.shards)]


def make_train_step(
    model: Any,
    *,
    loss: Any,
    optimizer: Any,
    sparse_optimizer: SparseOptimizer | None = None,
) -> Callable[[Any, Any], tf.Tensor]:
    """A ``tf.function`` ``step(features, labels) -> loss`` training ``model``, for hand-written loops.

    It runs the engine's ``ShardedTrainStep`` (what ``toolkit.fit`` uses), so
    the loss is averaged over the *global* batch: under ``strategy.run`` with
    N replicas, the summed gradients are those of the global mean. Builds both
    optimizers now (call it under the strategy's scope, so slots are created
    where the strategy wants them).

    Args:
        model: a built Keras 3 model, with or without sharded embeddings.
        loss: a Keras loss (its reduction is switched off), a loss name, or a
            function returning one loss per example.
        optimizer: a Keras optimizer for the dense variables.
        sparse_optimizer: updates the sharded tables (None: ``optimizer``'s own maths, row-sparse).

    Returns:
        ``step(features, labels)``: the mean loss over this replica's batch
        (plus the model's regularization losses).
    """
    optimizer.build(list(model.trainable_variables))
    state = TrainState(model=model, optimizer=optimizer, global_step=None)
    one_step = ShardedTrainStep(state, make_forward(loss), {}, sparse_optimizer=sparse_optimizer)

    @tf.function
    def step(features: Any, labels: Any) -> tf.Tensor:
        stats = one_step(features, labels)
        return stats[1] / tf.maximum(stats[0], 1.0)

    return step


def copy_sharded_tables(model: Any, clean: Any) -> None:
    """Sharded embedding tables are not among a model's weights: copies them shard by shard into ``clean``."""
    if not has_sharded_tables(model):
        return
    fresh_layers = {layer.name: layer for layer in child_layers(clean, recursive=True)}
    for trained in sharded_tables(model):
        fresh = fresh_layers.get(trained.name)
        if is_sharded_keras_embedding(fresh) or isinstance(fresh, ShardedEmbedding):
            fresh_table = sharded_tables_of(fresh)
            fresh_table.assign_from([shard.numpy() for shard in trained.shards], layout=trained.layout)
        elif fresh is not None:  # a plain Keras Embedding, built outside parameter servers: the whole table
            nbytes = trained.rows * trained.dim * trained.dtype.size
            if nbytes >= _EXPORT_WARN_BYTES:
                logger.warning("export: embedding %r (%d x %d, %.0f MiB) is gathered whole into the exported model; "
                               "serve it from a task with that much memory, or export the lookup alone "
                               "(docs/model_parallel.md)", trained.name, trained.rows, trained.dim, nbytes / 2**20)
            fresh.embeddings.assign(trained.to_numpy())


register_model_step(has_sharded_tables, ShardedTrainStep)
register_export_state(copy_sharded_tables)
