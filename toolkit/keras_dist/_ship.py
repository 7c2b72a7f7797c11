"""Keras' ``model.fit`` under parameter servers in between-graph steps: the chief ships each worker its graph.

In TensorFlow's parameter-server tutorial the workers never see the model: they serve
(``run_role()``) while the chief builds, compiles and fits it. ``toolkit.fit``'s fast path
(``toolkit.training.between_graph``) needs every worker to build the model itself. Here the
chief does it for them:

* the variables Keras created (anonymous eager resources no other client can open) are copied,
  each on its own ps, into *named* ones, and the model's variables (and its sharded tables'
  shards) are pointed at the copies; the optimizer, the global step and the step's own state are
  created named (``NamedVariables``);
* for each worker the chief builds, in a ``tf.Graph``, exactly what a ``toolkit.fit`` worker would
  build (``build_worker_step``: the worker's input pipeline, a clone of the model bound to the
  named variables, the compiled loss and metrics, ``steps_per_execution`` steps per token, packed
  transfers), serializes it and publishes it on the first ps (``strategies._shipped_steps``);
* the workers (which raised ``SHIPPED_FLAG`` when they started serving) import and run it; the
  chief keeps every other duty of ``fit`` (callbacks, validation, checkpoints, history).

When a worker does not take shipped steps, or the model or input cannot be rebuilt in a graph
(a model ``clone_model`` cannot clone, an input pipeline bound to this process), the chief
coordinates the steps as before, and says why in the log.
"""
from __future__ import annotations

import json
import logging
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from strategies import _native as native
from strategies._shipped_steps import SHIPPED_FLAG, SHIPPED_MANIFEST, shipped_graph_name
from toolkit._compat.keras import bind_variable, clone_uncompiled
from toolkit._graph_packing import pack_transfers
from toolkit.training.between_graph import NamedVariables, prefix, publish, unsupported, workers_stepping
from toolkit.training.between_graph_worker import build_worker_step, not_unused_asserts, ps_tasks
from toolkit.training.compiled import CompileRecord
from toolkit.training.config import TrainingError
from toolkit.training.runners import Runner, make_runner
from toolkit.training.state import TrainState
from toolkit.training.step import TrainStep
from toolkit.training.table_packing import pack_table_reads

__all__ = ["named_for", "prepare", "shipped_runner"]

logger = logging.getLogger(__name__)

_named: weakref.WeakKeyDictionary[keras.Model, NamedVariables] = weakref.WeakKeyDictionary()
#: what fails when a model or input pipeline cannot be rebuilt in a graph (the chief then coordinates)
_NOT_REBUILDABLE = (TrainingError, TypeError, ValueError, NotImplementedError, AttributeError, KeyError)


def named_for(model: keras.Model) -> NamedVariables:
    """The creator that names ``model``'s training state (the same for every ``fit`` of the model)."""
    named = _named.get(model)
    if named is None:
        named = _named[model] = NamedVariables(prefix())
    return named


def _inner(variable: Any) -> Any:
    return variable.value if isinstance(variable, keras.Variable) else variable


def _named_copy(named: NamedVariables, strategy: tf.distribute.Strategy, old: Any) -> Any:
    """A named variable beside ``old`` (on its ps) holding its value; the copy stays on that ps."""
    with tf.variable_creator_scope(named), strategy.scope(), strategy.extended.colocate_vars_with(old):
        return tf.Variable(lambda: old.read_value(), dtype=old.dtype, shape=old.shape, trainable=old.trainable,
                           name=old.name.split(":")[0], aggregation=old.aggregation,
                           synchronization=old.synchronization)


def _name_model(model: keras.Model, named: NamedVariables, strategy: tf.distribute.Strategy) -> int:
    """Points the model's anonymous variables and table shards at named copies; returns how many moved."""
    from toolkit.layers.train_step import sharded_tables

    moved = 0
    for variable in model.variables:
        if not named.knows(variable):
            bind_variable(variable, _named_copy(named, strategy, _inner(variable)))
            moved += 1
    for table in sharded_tables(model):
        if not all(named.knows(shard) for shard in table.shards):
            table.replace_shards([shard if named.knows(shard) else _named_copy(named, strategy, shard)
                                  for shard in table.shards])
            moved += len(table.shards)
    return moved


def _worker_graph(manifest: dict[str, Any], model: keras.Model, record: CompileRecord, dataset_fn: Any, *,
                  index: int, workers: int) -> tuple[bytes, dict[str, Any]]:
    """Worker ``index``'s step graph, built here as the worker would build it: (serialized, fetch names)."""
    worker_device = f"/job:worker/replica:0/task:{index}"
    # the worker imports the graph (it must know the op) and its ps run it: both probed, from here
    native_tasks = native.probe([worker_device, *ps_tasks(manifest)]) if native.load() is not None else []
    if worker_device not in native_tasks:
        native_tasks = []
    elif len(native_tasks) > 1:
        logger.info("model.fit: worker-%d's sparse Adagrad updates on %s run tfdist's native kernel", index,
                    ", ".join(native_tasks[1:]))
    graph = tf.Graph()
    with graph.as_default():
        train, token, initializer, ready = build_worker_step(
            manifest, model_fn=lambda: clone_uncompiled(model), dataset_fn=dataset_fn, forward=None,
            global_batch_size=None, num_workers=workers, index=index, worker_device=worker_device, learn=record,
            native_tasks=native_tasks)
    pack_table_reads(graph)
    pack_transfers(graph, [*train, token])
    fetches = {"token": token.name, "train": [op.name for op in train], "initializer": initializer.name,
               "ready": ready.name}
    return graph.as_graph_def().SerializeToString(), fetches


def _ship(manifest: dict[str, Any], model: keras.Model, record: CompileRecord, dataset_fn: Any,
          workers: int) -> None:
    logging.getLogger("tensorflow").addFilter(not_unused_asserts)
    graphs = [_worker_graph(manifest, model, record, dataset_fn, index=i, workers=workers) for i in range(workers)]
    for index, (serialized, _) in enumerate(graphs):
        publish(shipped_graph_name(index), serialized)
    # one fetch list: every worker's graph is built by the same code, so its names are the same
    publish(SHIPPED_MANIFEST, json.dumps({"id": uuid.uuid4().hex, "fetches": graphs[0][1]}))
    logger.info("between-graph steps: shipped each of %d workers its step graph (%.1f MiB)", workers,
                max(len(s) for s, _ in graphs) / 2**20)


def prepare(model: keras.Model, record: CompileRecord, *, workers: int, from_dataset: bool = False) -> bool:
    """Whether every worker takes shipped steps; if so, ``model``'s variables are named (call it before the
    training state and step are built, so that they hold the named variables).

    ``from_dataset``: the input is a ``tf.data.Dataset`` built on the chief, rebuilt from its serialized
    graph (``_inputs.per_worker``), which a shipped graph cannot carry (a graph optimizer folds the
    rebuilt dataset into a constant that cannot travel): the chief coordinates.
    """
    if from_dataset:
        logger.info("model.fit: the input is a tf.data.Dataset built on the chief, so the chief coordinates the "
                    "steps; pass a dataset function (input_context -> dataset) to have the workers step")
        return False
    if not workers_stepping(workers, flag=SHIPPED_FLAG):
        return False
    moved = _name_model(model, named_for(model), record.strategy)
    if moved:
        logger.info("model.fit: %d variables of model %r now named on their ps, for the workers' graphs", moved,
                    model.name)
    return True


def shipped_runner(model: keras.Model, record: CompileRecord, state: TrainState, step: TrainStep, *,
                   dataset_fn: Any, workers: int) -> Callable[..., Runner] | None:
    """The engine's runner factory for between-graph steps the chief ships (None: the coordinator runs them).

    Call ``prepare`` first (it said yes).
    """
    reason = unsupported(step)
    if reason is not None:
        logger.info("model.fit: between-graph steps cannot run %s; the chief coordinates the steps", reason)
        return None
    named = named_for(model)

    def runner(strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, **kwargs: Any) -> Runner:
        built = make_runner(strategy, step, global_step, kind="between_graph", state=state, named=named,
                            steps_per_execution=record.steps_per_execution, **kwargs)
        try:
            _ship(built.manifest, model, record, dataset_fn, workers)  # type: ignore[attr-defined]
        except _NOT_REBUILDABLE as exc:
            built.close()
            logger.warning("model.fit: the workers' step graphs could not be built (%s: %s); the chief coordinates "
                           "the steps", type(exc).__name__, exc, exc_info=logger.isEnabledFor(logging.DEBUG))
            return make_runner(strategy, step, global_step, dataset_fn=dataset_fn, **kwargs)
        return built

    return runner
