"""Between-graph steps under parameter servers: the worker's side.

Beside its server, a worker says it will run steps (a flag on its own device), waits for the
chief's manifest (``toolkit.training.between_graph``), builds ``model_fn()`` and the optimizer
in a ``tf.Graph`` with their variables pointed at the chief's named ones, and calls the same
``TrainStep`` every other runner calls (forward pass, scaled loss, gradients, the optimizer's
own update) ``steps_per_execution`` times in a row. Graph mode does not order ops on one
resource by itself, so the steps are built under TensorFlow's automatic control dependencies,
as ``tf.function`` would build them. Each optimizer update runs on its variable's ps, the
tensors each pair of tasks exchanges travel packed, and one ``session.run`` runs one token's
steps until the chief closes the queue (or this task stops).
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from strategies import _native as native
from strategies._shipped_steps import run_token_loop
from strategies.sharding import shard_source
from toolkit._compat.keras import adagrad_accumulator, bind_variable, count_atomically
from toolkit._compat.tensorflow import automatic_control_dependencies, named_variable
from toolkit._graph_packing import pack_transfers, task_of
from toolkit.training.between_graph import MANIFEST, MANIFEST_DEVICE, QUEUE_CAPACITY, WORKER_FLAG
from toolkit.training.compiled import CompileRecord, read_compiled
from toolkit.training.config import TrainingError
from toolkit.training.extensions import step_factory_for
from toolkit.training.runners import DatasetFn, _check_batch
from toolkit.training.state import GlobalStepSchedule, TrainState
from toolkit.training.step import Forward, TrainStep
from toolkit.training.table_packing import pack_table_reads

if TYPE_CHECKING:
    from tf_config import TFConfig

__all__ = ["build_worker_step", "not_unused_asserts", "ps_tasks", "run_worker", "worker_loop"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

def not_unused_asserts(record: logging.LogRecord) -> bool:
    """TensorFlow reports the asserts of ``tf.nn.compute_average_loss`` in a graph as never used; they run."""
    message = record.getMessage()
    return not ("Object was never used" in message and "/Assert" in message)


def worker_loop(model_fn: Callable[[], keras.Model], dataset_fn: DatasetFn, *, forward: Forward | None,
                global_batch_size: int | None, tf_config: TFConfig | None) -> Callable[[str, threading.Event], int]:
    """``fit``'s work for a parameter-server worker, run beside its server (``strategies.serve(work=...)``)."""

    def work(target: str, stop: threading.Event) -> int:
        from tf_config import TFConfig

        cfg = TFConfig.from_env() if tf_config is None else tf_config
        return run_worker(target, num_workers=len(cfg.cluster.get("worker", ())), index=cfg.task_index, stop=stop,
                          model_fn=model_fn, dataset_fn=dataset_fn, forward=forward,
                          global_batch_size=global_batch_size)

    return work


def _open(spec: Mapping[str, Any], *, trainable: bool = False) -> tf.Variable:
    with v1.device(spec["device"]):
        return named_variable(spec["name"], spec["dtype"], spec["shape"], trainable=trainable)


def _announce_and_read_manifest(target: str, config: tf.compat.v1.ConfigProto, worker_device: str, ps_device: str,
                                *, stop: threading.Event) -> dict[str, Any] | None:
    """Raises this worker's flag (it will run steps), then waits for the chief's manifest; None if ``stop``."""
    graph = tf.Graph()
    with graph.as_default():
        with v1.device(worker_device):
            flag = tf.raw_ops.AssignVariableOp(resource=named_variable(WORKER_FLAG, tf.int64, [], trainable=False)
                                               .handle, value=tf.constant(1, tf.int64))
        with v1.device(ps_device):
            handle = named_variable(MANIFEST, tf.string, [], trainable=False).handle
            ready = tf.raw_ops.VarIsInitializedOp(resource=handle)
            value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.string)
    with v1.Session(target, graph=graph, config=config) as session:
        session.run(flag)
        while not stop.is_set():
            if session.run(ready):
                return json.loads(session.run(value).decode())
            stop.wait(0.1)
    return None


def _table_source(tables: Mapping[str, Mapping[str, Any]]) -> Callable[[str], Any]:
    """``shard_source`` over the chief's tables: each shard opened by its shared name, on its ps."""

    def source(name: str) -> tuple[list[tf.Variable], str] | None:
        table = tables.get(name)
        if table is None:
            return None
        return [_open(shard, trainable=True) for shard in table["shards"]], table["partition"]

    return source


def _bind(variables: Sequence[keras.Variable], specs: Sequence[Mapping[str, Any]], what: str) -> None:
    """Points each of ``variables`` at the chief's variable of the same position."""
    if len(variables) != len(specs):
        raise TrainingError(f"between-graph steps: {what} has {len(variables)} variables on this worker but "
                            f"{len(specs)} on the chief; every task must build the same model and optimizer.",
                            field="model_fn")
    for variable, spec in zip(variables, specs, strict=True):
        if list(variable.shape) != list(spec["shape"]):
            raise TrainingError(f"between-graph steps: {what} variable {variable.path!r} has shape "
                                f"{list(variable.shape)} on this worker but {spec['shape']} on the chief; every "
                                "task must build the same model and optimizer.", field="model_fn")
        bind_variable(variable, _open(spec, trainable=variable.trainable))


def _optimizer(spec: Mapping[str, Any], global_step: tf.Variable) -> keras.optimizers.Optimizer:
    """The chief's optimizer, rebuilt from its config; a schedule follows the global step, as on the chief."""
    optimizer = keras.saving.deserialize_keras_object(spec["serialized"])
    if spec["follows_global_step"]:
        schedule = keras.optimizers.schedules.deserialize(spec["serialized"]["config"]["learning_rate"])
        optimizer.learning_rate = GlobalStepSchedule(schedule, global_step)
    update = optimizer.update_step
    fused = type(optimizer) is keras.optimizers.Adagrad

    def update_on_its_ps(gradient: Any, variable: Any, learning_rate: Any) -> Any:
        # Each variable's update runs where the variable and its slots live: one gradient crosses, not the slots.
        with v1.device((variable.value if isinstance(variable, keras.Variable) else variable).device):
            if fused and isinstance(gradient, tf.Tensor):
                return _fused_adagrad(optimizer, gradient, variable, learning_rate)
            return update(gradient, variable, learning_rate)

    optimizer.update_step = update_on_its_ps
    return optimizer


def _fused_adagrad(optimizer: keras.optimizers.Adagrad, gradient: tf.Tensor, variable: Any,
                   learning_rate: Any) -> tf.Operation:
    """Keras' Adagrad step as TensorFlow's one fused kernel on the ps (what TF1's Adagrad ran).

    Keras' update is a square, an add to the accumulator, a read, a square root, a division and a
    subtraction, each an op on the ps every step. The kernel puts epsilon outside the square root
    (Keras: inside); with the accumulator at least its initial value, they differ by < 1e-6 relative.
    """
    inner, accumulator = (v.value if isinstance(v, keras.Variable) else v
                          for v in (variable, adagrad_accumulator(optimizer, variable)))
    dtype = inner.dtype
    return tf.raw_ops.ResourceApplyAdagradV2(
        var=inner.handle, accum=accumulator.handle,
        lr=tf.cast(learning_rate, dtype), epsilon=tf.constant(optimizer.epsilon, dtype),
        grad=tf.cast(gradient, dtype), use_locking=False)


def _add(variable: tf.Variable, value: Any) -> tf.Operation:
    return tf.raw_ops.AssignAddVariableOp(resource=variable.handle, value=tf.cast(value, variable.dtype))


class _WorkerStep(TrainStep):
    """Reads nothing back after the update: ``_steps`` counts a step after all its stateful ops (RPCs less)."""

    def apply(self, gradients: Sequence[tf.Tensor | None], variables: Sequence[keras.Variable], *,
              step: tf.Tensor | None = None) -> list[tf.Tensor]:
        self.optimizer.apply_gradients(zip(gradients, variables, strict=False))
        return []


def _steps(step: TrainStep, next_batch: Callable[[], Any], token: tf.Tensor, *, count: int, global_step: tf.Variable,
           totals: tf.Variable, worker_device: str) -> tuple[list[tf.Operation], tf.Tensor]:
    """``count`` steps in a row, the ``i``-th run only when ``token > i``; each counted after its stateful ops.

    Returns the ops and the token as a float packed with the variables' values, not a transfer of its own.
    The worker's stateful ops (batch, asserts) go ahead of its stats, which are packed with the gradients.
    """
    with v1.device(token.device):
        as_float = tf.cast(token, tf.float32)
    with v1.device(worker_device):
        seen = tf.cast(as_float, tf.int64)
    ops: list[tf.Operation] = []
    go: Any = token
    for i in range(count):
        if i:  # the token if > i, else dead (so is every op after it); the identity carries deadness on control edges
            with v1.device(token.device), tf.control_dependencies([ops[-1]]):
                go = tf.identity(tf.raw_ops.Switch(data=token, pred=tf.greater(token, i))[1])
        with tf.control_dependencies([go]), automatic_control_dependencies() as ordered:
            features, labels = _check_batch(next_batch())
            stats = step(features, labels)
        here = [op for op in ordered.ops_which_must_run if task_of(op) == task_of(stats.op)]
        with v1.device(worker_device), tf.control_dependencies(here):
            stats = tf.identity(stats)
        with v1.device(global_step.device):  # the step's other stateful ops (its updates), gathered on the ps
            done = tf.group(*[op for op in ordered.ops_which_must_run if op not in here])
        with v1.device(totals.device), tf.control_dependencies([done]):
            added = _add(totals, stats)
        with v1.device(global_step.device), tf.control_dependencies([done, added]):
            counted = _add(global_step, 1)
        ops += [added, counted]
    return ops, seen


def build_worker_step(manifest: Mapping[str, Any], *, model_fn: Callable[[], keras.Model],
                      dataset_fn: DatasetFn, forward: Forward | None, global_batch_size: int | None,
                      num_workers: int, index: int, worker_device: str, learn: CompileRecord | None = None,
                      native_tasks: Sequence[str] = ()) -> tuple[list[tf.Operation], tf.Tensor, tf.Operation,
                                                                  tf.Operation]:
    """In the current graph: (the execution's ops, its token, the iterator's initializer, the count of ready
    workers' increment).

    ``learn``: the loss and metrics to train with (None: those ``model_fn``'s model was compiled with).
    ``native_tasks``: the tasks ``strategies._native.probe`` found ready for tfdist's native kernels (the
    sparse Adagrad of tables on those ps uses them).
    """
    with native.kernels_on(native_tasks):
        return _build_worker_step(manifest, model_fn=model_fn, dataset_fn=dataset_fn, forward=forward,
                                  global_batch_size=global_batch_size, num_workers=num_workers, index=index,
                                  worker_device=worker_device, learn=learn)


def ps_tasks(manifest: Mapping[str, Any]) -> list[str]:
    """The ps tasks the manifest's variables live on (``/job:ps/replica:0/task:i``), sorted."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            device = value.get("device")
            if isinstance(device, str) and "/job:ps" in device:
                spec = tf.DeviceSpec.from_string(device)
                found.add(f"/job:ps/replica:0/task:{spec.task or 0}")
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(manifest)
    return sorted(found)


def _build_worker_step(manifest: Mapping[str, Any], *, model_fn: Callable[[], keras.Model],
                       dataset_fn: DatasetFn, forward: Forward | None, global_batch_size: int | None,
                       num_workers: int, index: int, worker_device: str, learn: CompileRecord | None,
                       ) -> tuple[list[tf.Operation], tf.Tensor, tf.Operation, tf.Operation]:
    queue = manifest["queue"]
    with v1.device(queue["device"]):
        tokens = tf.queue.FIFOQueue(QUEUE_CAPACITY, [tf.int64], shapes=[[]], shared_name=queue["name"],
                                    name="step_tokens")
        token = tokens.dequeue()
    with v1.device(worker_device):
        context = tf.distribute.InputContext(num_input_pipelines=num_workers, input_pipeline_id=index,
                                             num_replicas_in_sync=1)
        dataset = dataset_fn(context)
        skip = int(manifest["start"]) // max(num_workers, 1)
        if skip:
            dataset = dataset.skip(skip)
        iterator = v1.data.make_initializable_iterator(dataset)
        with shard_source(_table_source(manifest.get("tables", {}))):  # the chief's sharded tables, opened
            model = model_fn()
        if not model.built:
            with tf.control_dependencies(None):
                model(_check_batch(iterator.get_next())[0])  # creates the variables of a model built on its first call
        if learn is None:
            learn = read_compiled(model, None, forward=forward)  # the loss and metrics the chief compiled too
        _bind(model.variables, manifest["model"], "the model")
        global_step = _open(manifest["global_step"])
        optimizer = _optimizer(manifest["optimizer"], global_step)
        optimizer.build(model.trainable_variables)
        _bind(optimizer.variables, manifest["optimizer"]["variables"], "the optimizer")
        count_atomically(optimizer.iterations)  # workers step at once: Keras' read-and-write would lose counts
        state = TrainState(model=model, optimizer=optimizer, global_step=global_step)
        factory = step_factory_for(model, _WorkerStep)
        if factory is _WorkerStep:
            step = _WorkerStep(state, learn.forward(), learn.metrics, global_batch_size=global_batch_size)
        else:  # a registered step (sharded tables): it rebinds its own state to the chief's
            rebuild = factory.for_worker  # type: ignore[attr-defined]
            step = rebuild(state, learn.forward(), learn.metrics, global_batch_size=global_batch_size,
                           spec=manifest.get("step", {}), open_variable=_open)
        ops, token = _steps(step, iterator.get_next, token, count=int(manifest["steps_per_execution"]),
                            global_step=global_step, totals=_open(manifest["totals"]), worker_device=worker_device)
    with v1.device(manifest["ready"]["device"]):
        ready = _add(_open(manifest["ready"]), 1)
    return ops, token, iterator.initializer, ready


def run_worker(target: str, *, num_workers: int, index: int, stop: threading.Event, **step_args: Any) -> int:
    """The worker's loop: one ``session.run`` per token until the queue closes (or ``stop``); returns the steps run."""
    worker_device = f"/job:worker/replica:0/task:{index}"
    config = v1.ConfigProto(device_filters=["/job:ps", worker_device])
    manifest = _announce_and_read_manifest(target, config, worker_device, MANIFEST_DEVICE, stop=stop)
    if manifest is None or stop.is_set():  # the job ended before the chief's manifest (a resumed run, nothing to do)
        return _ended_before_first_step(index)
    if manifest.get("mode") != "between_graph":
        logger.info("worker-%d: the chief coordinates the steps; this worker serves them", index)
        return 0
    logging.getLogger("tensorflow").addFilter(not_unused_asserts)
    native_tasks = native.probe(ps_tasks(manifest), target, config=config)
    if native_tasks:
        logger.info("worker-%d: sparse Adagrad updates on %s run tfdist's native kernel", index,
                    ", ".join(native_tasks))
    graph = tf.Graph()
    with graph.as_default():
        train, token, initializer, ready = build_worker_step(
            manifest, num_workers=num_workers, index=index, worker_device=worker_device, native_tasks=native_tasks,
            **step_args)
    saved = pack_table_reads(graph) + pack_transfers(graph, [*train, token])
    logger.info("worker-%d: %d fewer transfers per execution (packed per pair of tasks)", index, saved)
    if stop.is_set():  # the job ended while this worker built its steps
        return _ended_before_first_step(index)
    return run_token_loop(target, graph, config, token=token, train=train, initializer=initializer, ready=ready,
                          index=index, stop=stop, log=logger)


def _ended_before_first_step(index: int) -> int:
    logger.info("worker-%d: between-graph steps done: 0 steps (the job ended before its first step)", index)
    return 0
