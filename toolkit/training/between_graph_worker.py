"""Between-graph steps under parameter servers, ``fit(..., options=FitOptions(between_graph=True))``: the worker's side.

Beside its server, a worker waits for the chief's manifest (``toolkit.training.between_graph``),
builds ``model_fn()`` in a ``tf.Graph`` with its variables pointed at the chief's named ones,
builds one step (its shard of the data, forward pass and gradients here, Keras' update as
TensorFlow's fused op on each variable's ps, the model's state updates, the stats and the global
step), packs the tensors each pair of tasks exchanges, and runs one ``session.run`` per token from
the chief's queue until a stop token.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from toolkit._compat.tensorflow import named_variable
from toolkit._graph_packing import pack_transfers
from toolkit.training.between_graph import MANIFEST, QUEUE_CAPACITY
from toolkit.training.config import TrainingError
from toolkit.training.runners import DatasetFn, _check_batch
from toolkit.training.step import Forward, ResolvedMetric, _Step

if TYPE_CHECKING:
    from tf_config import TFConfig

__all__ = ["build_worker_step", "fused_update", "run_worker", "worker_loop"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

#: ops of the forward pass that are the model's own state updates (dropout seeds, batch-norm statistics)
_STATE_UPDATES = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})


def worker_loop(model_fn: Callable[[], keras.Model], dataset_fn: DatasetFn, *, forward: Forward,
                metrics: Mapping[str, ResolvedMetric], global_batch_size: int | None,
                tf_config: TFConfig | None) -> Callable[[str, threading.Event], int]:
    """``fit``'s work for a parameter-server worker, run beside its server (``strategies.serve(work=...)``)."""

    def work(target: str, stop: threading.Event) -> int:
        from tf_config import TFConfig

        cfg = TFConfig.from_env() if tf_config is None else tf_config
        return run_worker(target, num_workers=len(cfg.cluster.get("worker", ())), index=cfg.task_index, stop=stop,
                          model_fn=model_fn, dataset_fn=dataset_fn, forward=forward, metrics=metrics,
                          global_batch_size=global_batch_size)

    return work


def _open(spec: Mapping[str, Any], *, trainable: bool = False) -> tf.Variable:
    with v1.device(spec["device"]):
        return named_variable(spec["name"], spec["dtype"], spec["shape"], trainable=trainable)


def _read_manifest(target: str, config: tf.compat.v1.ConfigProto, ps_device: str, *,
                   stop: threading.Event) -> dict[str, Any] | None:
    """Waits for the chief's manifest; None if ``stop`` is set first."""
    graph = tf.Graph()
    with graph.as_default(), v1.device(ps_device):
        handle = named_variable(MANIFEST, tf.string, [], trainable=False).handle
        ready = tf.raw_ops.VarIsInitializedOp(resource=handle)
        value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.string)
    with v1.Session(target, graph=graph, config=config) as session:
        while not stop.is_set():
            if session.run(ready):
                return json.loads(session.run(value).decode())
            stop.wait(0.1)
    return None


def _bind_model(model: keras.Model, specs: Sequence[Mapping[str, Any]]) -> None:
    """Points each of the model's variables at the chief's variable of the same position."""
    ours = list(model.variables)
    if len(ours) != len(specs):
        raise TrainingError(f"between_graph: model_fn() built {len(ours)} variables on this worker but "
                            f"{len(specs)} on the chief; every task must build the same model.", field="model_fn")
    for variable, spec in zip(ours, specs, strict=True):
        if list(variable.shape) != list(spec["shape"]):
            raise TrainingError(f"between_graph: variable {variable.path!r} has shape {list(variable.shape)} on "
                                f"this worker but {spec['shape']} on the chief; every task must build the same "
                                "model.", field="model_fn")
        variable._value = _open(spec, trainable=variable.trainable)  # noqa: SLF001


def _gate(value: tf.Tensor, go: tf.Tensor) -> tf.Tensor:
    """``value`` when ``go``, else a dead tensor: every op fed by it is skipped."""
    return tf.raw_ops.Switch(data=value, pred=go)[1]


def fused_update(spec: Mapping[str, Any], variable: tf.Tensor, slots: Sequence[tf.Tensor], gradient: tf.Tensor,
                 rate: tf.Tensor, local_step: tf.Tensor) -> tf.Operation:
    """Keras' update of one variable (``spec["kind"]`` adam or sgd) as TensorFlow's fused op on its handles.

    ``local_step`` is Keras' ``iterations + 1``; ``slots`` the handles of the optimizer's slots for it
    (Adam's momentum and velocity, SGD's momentum if any).
    """
    if spec["kind"] == "adam":
        beta_1, beta_2 = tf.constant(spec["beta_1"], tf.float32), tf.constant(spec["beta_2"], tf.float32)
        return tf.raw_ops.ResourceApplyAdam(
            var=variable, m=slots[0], v=slots[1], beta1_power=tf.pow(beta_1, local_step),
            beta2_power=tf.pow(beta_2, local_step), lr=rate, beta1=beta_1, beta2=beta_2,
            epsilon=tf.constant(spec["epsilon"], tf.float32), grad=gradient)
    if slots:
        return tf.raw_ops.ResourceApplyKerasMomentum(
            var=variable, accum=slots[0], lr=rate, grad=gradient, momentum=tf.constant(spec["momentum"], tf.float32),
            use_nesterov=spec["nesterov"])
    return tf.raw_ops.ResourceApplyGradientDescent(var=variable, alpha=rate, delta=gradient)


def _updates(manifest: Mapping[str, Any], gradients: Sequence[tf.Tensor], variables: Sequence[Any],
             go: tf.Tensor, global_step: Any) -> list[tf.Operation]:
    """The optimizer's fused update of each variable on its own device, and the iteration count."""
    spec = manifest["optimizer"]
    iterations = _open(spec["iterations"])
    with v1.device(spec["iterations"]["device"]):
        if spec["schedule"] is not None:
            schedule = keras.optimizers.schedules.deserialize(spec["schedule"])
            rate = tf.cast(schedule(tf.cast(global_step.read_value(), tf.float32)), tf.float32)
        else:
            rate = tf.cast(_open(spec["learning_rate"]).read_value(), tf.float32)
        local_step = tf.cast(iterations.read_value() + 1, tf.float32)
    ops = []
    for gradient, variable, slots in zip(gradients, variables, manifest["slots"], strict=True):
        with v1.device(variable.device):
            grad = _gate(tf.convert_to_tensor(gradient), go)
            ops.append(fused_update(spec, variable.handle, [_open(slot).handle for slot in slots], grad, rate,
                                    local_step))
    with v1.device(spec["iterations"]["device"]), tf.control_dependencies(ops):
        ops.append(tf.raw_ops.AssignAddVariableOp(resource=iterations.handle,
                                                  value=_gate(tf.constant(1, iterations.dtype), go)))
    return ops


def build_worker_step(manifest: Mapping[str, Any], *, model_fn: Callable[[], keras.Model],
                      dataset_fn: DatasetFn, forward: Forward, metrics: Mapping[str, ResolvedMetric],
                      global_batch_size: int | None, num_workers: int, index: int,
                      worker_device: str) -> tuple[tf.Operation, tf.Tensor, tf.Operation, tf.Operation, tf.Operation]:
    """In the current graph: (the step's ops, its token, the iterator's initializer, the queue's close, the
    count of ready workers' increment)."""
    queue = manifest["queue"]
    with v1.device(queue["device"]):
        tokens = tf.queue.FIFOQueue(QUEUE_CAPACITY, [tf.int64], shapes=[[]], shared_name=queue["name"],
                                    name="step_tokens")
        token = tokens.dequeue()
        go = tf.greater_equal(token, 0)
    with v1.device(worker_device):
        context = tf.distribute.InputContext(num_input_pipelines=num_workers, input_pipeline_id=index,
                                             num_replicas_in_sync=1)
        dataset = dataset_fn(context)
        skip = int(manifest["start"]) // max(num_workers, 1)
        if skip:
            dataset = dataset.skip(skip)
        iterator = v1.data.make_initializable_iterator(dataset)
        features, labels = _check_batch(iterator.get_next())
        model = model_fn()
        if not model.built:
            model(features)  # creates the variables of a model built on its first call
        _bind_model(model, manifest["model"])
        by_name = {spec["name"]: v.value for v, spec in zip(model.variables, manifest["model"], strict=True)}
        trainable = [by_name[name] for name in manifest["trainable"]]
        global_step = _open(manifest["global_step"])
        # Every op of the forward pass waits for the token, and a stop token makes them all dead: the
        # variables are read once the step may run, and a stop token runs nothing.
        allowed = _gate(token, go)
        before = len(tf.compat.v1.get_default_graph().get_operations())
        with tf.control_dependencies([allowed]):
            per_example, predictions = forward(model, features, labels, True)
            regularization = tf.add_n([tf.constant(0.0), *model.losses])
        # The model's own state updates (dropout seeds, batch-norm statistics), which eager mode would run
        state_updates = [op for op in tf.compat.v1.get_default_graph().get_operations()[before:]
                         if op.type in _STATE_UPDATES]
        # TrainStep.scaled_loss with one replica per worker (tf.nn.compute_average_loss adds asserts a
        # graph would have to run by hand)
        batch = tf.cast(global_batch_size or tf.shape(per_example)[0], per_example.dtype)
        loss = tf.reduce_sum(per_example) / batch + regularization
        gradients = tf.gradients(loss, [v.handle for v in trainable])
        stats = _Step(model, forward, metrics)._stats(labels, predictions, per_example, regularization)  # noqa: SLF001
    ops = _updates(manifest, gradients, trainable, go, global_step) + state_updates
    totals = _open(manifest["totals"])
    with v1.device(manifest["totals"]["device"]):
        ops.append(tf.raw_ops.AssignAddVariableOp(resource=totals.handle,
                                                  value=_gate(tf.cast(stats, tf.float64), go)))
    with v1.device(manifest["global_step"]["device"]), tf.control_dependencies(ops):
        counted = tf.raw_ops.AssignAddVariableOp(resource=global_step.handle,
                                                 value=_gate(tf.constant(1, tf.int64), go))
    with v1.device(manifest["ready"]["device"]):
        ready = _open(manifest["ready"]).assign_add(1).op
    return counted, token, iterator.initializer, tokens.close(cancel_pending_enqueues=True), ready


def run_worker(target: str, *, num_workers: int, index: int, stop: threading.Event, **step_args: Any) -> int:
    """The worker's loop: one ``session.run`` per token until a stop token (or ``stop``); returns the steps run."""
    worker_device = f"/job:worker/replica:0/task:{index}"
    ps_device = "/job:ps/replica:0/task:0"
    config = v1.ConfigProto(device_filters=["/job:ps", worker_device])
    manifest = _read_manifest(target, config, ps_device, stop=stop)
    if manifest is None:
        return 0
    graph = tf.Graph()
    with graph.as_default():
        train, token, initializer, close, ready = build_worker_step(
            manifest, num_workers=num_workers, index=index, worker_device=worker_device,
            **step_args)
    saved = pack_transfers(graph, [train, token])
    logger.info("worker-%d: %d fewer transfers per step (packed per pair of tasks)", index, saved)
    steps = 0
    with v1.Session(target, graph=graph, config=config) as session:
        session.run(initializer)
        session.run(ready)
        run_step = session.make_callable([token, train])
        done = threading.Event()
        watcher = threading.Thread(target=_close_on_stop, args=(session, close, stop, done), daemon=True,
                                   name=f"worker-{index} stop watcher")
        watcher.start()
        logger.info("worker-%d: between-graph steps ready (%d variables on the ps)", index, len(manifest["model"]))
        try:
            while True:
                got, _ = run_step()
                if got < 0:
                    break
                steps += 1
        except tf.errors.OutOfRangeError:  # the queue was closed: this task is stopping
            logger.info("worker-%d: stopped while waiting for a step token", index)
        finally:
            done.set()
            watcher.join()
    logger.info("worker-%d: between-graph steps done: %d steps", index, steps)
    return steps


def _close_on_stop(session: tf.compat.v1.Session, close: tf.Operation, stop: threading.Event,
                   done: threading.Event) -> None:
    """Closes the token queue if the task stops (e.g. its chief is gone) while its loop waits for a token."""
    while not done.is_set():
        if stop.wait(0.5):
            if not done.is_set():
                try:
                    session.run(close)
                except tf.errors.OpError as exc:  # the ps may be gone as well; the loop's run fails then too
                    logger.debug("closing the token queue failed: %s", exc)
            return
