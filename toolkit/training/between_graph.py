"""Between-graph steps under parameter servers: ``fit(..., between_graph=True)``.

Under ``ClusterCoordinator`` every step is a closure the chief sends to a
worker, which runs it as a multi-device function and answers: at one step per
closure that costs about 3 ms of the chief's CPU and 1.5 ms of the worker's per
step (``docs/training.md``, "CPU per global step"). TF1's between-graph
replication has neither cost: each worker is its own client and runs its own
graph, one ``session.run`` per step. This module runs Keras 3 models that way,
while the chief keeps every other duty of ``fit`` (restore, checkpoints,
summaries, progress, callbacks, validation, export):

* The chief builds the model, the optimizer and the global step as usual, but
  each variable gets a *named* resource on its ps (``NamedVariables``; eager
  variables are anonymous, so no other client could find them). It publishes
  their names, the optimizer's kind and the stats layout in a manifest, a
  string variable on the first ps.
* Each worker reads the manifest, builds ``model_fn()`` in a ``tf.Graph``,
  points the model's variables at the chief's, and builds one training step:
  its shard of ``dataset_fn``, the forward pass and gradients on the worker,
  the optimizer's fused update (``ResourceApplyAdam``, ...) on each variable's
  ps, the model's own state updates, the step's stats added to a totals
  variable, and the global step counted after all of them (``run_worker``).
  The tensors one task sends another in a step travel packed, one per pair
  of tasks (``toolkit._graph_packing``, as in the graph-mode Estimator).
* A step runs only with a token from a queue on the first ps (TF1's
  ``SyncReplicasOptimizer`` token queue): the chief releases exactly as many
  tokens as the loop hands over, so the global step ends exactly on epoch
  ends and checkpoint steps, and a worker waiting for tokens blocks in the
  queue without using CPU. The chief waits by reading the global step, then
  reads the totals. Stop tokens end the workers' loops. A worker counts itself
  ready on the first ps once its loop is built; a chief that sees no step and
  no ready worker for 30 s says why (the workers only serve) instead of waiting.

Supported: Keras ``Adam`` (not amsgrad) and ``SGD`` (with or without momentum
and Nesterov), constant learning rates and schedules, without clipping,
weight decay, EMA or gradient accumulation; the default ``TrainStep``
(no ``train_step=``, no sharded tables, no ``sync=``). Anything else raises a
``TrainingError`` that says so (the coordinator runs all of it: drop
``between_graph``).
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from toolkit._compat.tensorflow import named_variable
from toolkit._graph_packing import pack_transfers
from toolkit.training.config import TrainingError
from toolkit.training.runners import DatasetFn, Runner, _check_batch
from toolkit.training.state import GlobalStepSchedule, TrainState
from toolkit.training.step import Forward, ResolvedMetric, TrainStep, _Step

__all__ = ["MANIFEST", "STOP", "BetweenGraphRunner", "NamedVariables", "build_worker_step", "check_supported",
           "fused_update", "hyperparameters", "prefix", "run_worker", "slots_of"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

#: the shared name of the manifest variable (a JSON string on the first ps)
MANIFEST = "tfdist_between_graph_manifest"
#: a token that ends a worker's loop instead of allowing a step
STOP = -1
_QUEUE_CAPACITY = 2**31 - 1
_STATE_UPDATES = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})
_MIN_POLL_SECS, _MAX_POLL_SECS = 0.001, 0.05
#: a wait that sees no step for this long, and at least _STALL_GAPS times the longest pause between steps so far,
#: with no token left, re-releases the missing tokens (a worker lost mid-step took its token with it)
_STALL_SECS, _STALL_GAPS = 30.0, 10


def _variable(shared_name: str, dtype: tf.DType | str, shape: tf.TensorShape | Sequence[int], *, trainable: bool,
              **kwargs: Any) -> tf.Variable:
    """A variable object on the named resource ``shared_name`` (on the current device)."""
    return named_variable(shared_name, dtype, shape, trainable=trainable, **kwargs)


class NamedVariables:
    """A variable creator (the chief's): each variable is a named resource another client can open.

    Enter it *outside* the strategy's scope, so the strategy's creator (which
    picks the ps) runs first and calls this one on the chosen device.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._names: dict[int, str] = {}  # id(handle) -> shared name
        self._keep: list[tf.Variable] = []

    def __call__(self, next_creator: Callable[..., tf.Variable], **kwargs: Any) -> tf.Variable:
        initial = kwargs.get("initial_value")
        if callable(initial):
            initial = initial()
        with tf.init_scope():
            initial = tf.convert_to_tensor(initial, dtype=kwargs.get("dtype"))
            shape = tf.TensorShape(kwargs.get("shape") or initial.shape)
            name = f"{self.prefix}/{len(self._names)}"
            variable = _variable(name, initial.dtype, shape, trainable=bool(kwargs.get("trainable", True)),
                                 synchronization=kwargs.get("synchronization"),
                                 aggregation=kwargs.get("aggregation"),
                                 distribute_strategy=kwargs.get("distribute_strategy"))
            tf.raw_ops.AssignVariableOp(resource=variable.handle, value=initial)
        self._names[id(variable.handle)] = name
        self._keep.append(variable)
        return variable

    def name_of(self, variable: keras.Variable | tf.Variable) -> str:
        inner = variable.value if isinstance(variable, keras.Variable) else variable
        try:
            return self._names[id(inner.handle)]
        except KeyError:
            raise TrainingError(f"between_graph: variable {getattr(variable, 'path', variable.name)!r} was not "
                                "created by the training state, so the workers cannot find it.",
                                field="between_graph") from None

    def describe(self, variable: keras.Variable | tf.Variable) -> dict[str, Any]:
        return {"name": self.name_of(variable), "dtype": tf.as_dtype(variable.dtype).name,
                "shape": list(variable.shape), "device": _device_of(variable)}


def _device_of(variable: keras.Variable | tf.Variable) -> str:
    inner = variable.value if isinstance(variable, keras.Variable) else variable
    return str(inner.handle.device)


def _optimizer_kind(optimizer: keras.optimizers.Optimizer) -> str:
    """``adam`` or ``sgd``; a ``TrainingError`` for what the fused updates do not reproduce exactly."""
    kind = {keras.optimizers.Adam: "adam", keras.optimizers.SGD: "sgd"}.get(type(optimizer))
    config = optimizer.get_config()
    unsupported = [key for key in ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay",
                                   "gradient_accumulation_steps", "loss_scale_factor") if config.get(key)]
    if config.get("use_ema"):
        unsupported.append("use_ema")
    if config.get("amsgrad"):
        unsupported.append("amsgrad")
    if kind is None or unsupported:
        what = type(optimizer).__name__ if kind is None else f"{type(optimizer).__name__}({', '.join(unsupported)})"
        raise TrainingError(
            f"between_graph=True runs the optimizer's update as TensorFlow's fused ops, which reproduce Keras' "
            f"Adam (without amsgrad) and SGD (with or without momentum) exactly; received {what}. Use one of "
            "those, or drop between_graph (the coordinator runs every optimizer).", field="between_graph")
    return kind


def check_supported(state: TrainState, step: TrainStep, *, sync: bool, custom_step: bool) -> str:
    """The optimizer kind if the between-graph step reproduces ``step``; else a ``TrainingError``."""
    if sync or custom_step or type(step) is not TrainStep:
        what = "sync=" if sync else f"train_step ({type(step).__name__})"
        raise TrainingError(
            f"between_graph=True builds the default TrainStep on each worker; it cannot run {what}. Drop "
            "between_graph (the coordinator runs it).", field="between_graph")
    return _optimizer_kind(state.optimizer)


def hyperparameters(optimizer: keras.optimizers.Optimizer, kind: str) -> dict[str, Any]:
    """What ``fused_update`` needs of ``optimizer`` besides its variables."""
    config = optimizer.get_config()
    return {"kind": kind, "beta_1": config.get("beta_1"), "beta_2": config.get("beta_2"),
            "epsilon": config.get("epsilon"), "momentum": config.get("momentum"),
            "nesterov": bool(config.get("nesterov"))}


def slots_of(optimizer: keras.optimizers.Optimizer, kind: str, index: int) -> list[keras.Variable]:
    """The optimizer's slot variables of its ``index``-th trainable variable, in ``fused_update``'s order."""
    if kind == "adam":
        return [optimizer._momentums[index], optimizer._velocities[index]]  # noqa: SLF001
    return [optimizer.momentums[index]] if optimizer.momentum else []


def _manifest(state: TrainState, named: NamedVariables, *, kind: str, width: int, start: int,
              totals: tf.Variable, ready: tf.Variable, queue_name: str, queue_device: str) -> dict[str, Any]:
    optimizer = state.optimizer
    trainable = list(state.model.trainable_variables)
    rate = optimizer._learning_rate  # noqa: SLF001
    schedule = rate.schedule if isinstance(rate, GlobalStepSchedule) else None
    return {
        "optimizer": {**hyperparameters(optimizer, kind), "iterations": named.describe(optimizer.iterations),
                      "learning_rate": None if schedule is not None else named.describe(rate),
                      "schedule": None if schedule is None else keras.optimizers.schedules.serialize(schedule)},
        "model": [named.describe(v) for v in state.model.variables],
        "trainable": [named.name_of(v) for v in trainable],
        "slots": [[named.describe(slot) for slot in slots_of(optimizer, kind, i)] for i in range(len(trainable))],
        "global_step": named.describe(state.global_step),
        "totals": named.describe(totals),
        "ready": named.describe(ready),
        "width": width,
        "start": start,
        "queue": {"name": queue_name, "device": queue_device},
    }


class BetweenGraphRunner(Runner):
    """The chief's side: releases step tokens, waits on the global step, reads the totals.

    ``coordinator`` is the strategy's ``ClusterCoordinator``, kept for the
    workers' validation closures (which run beside the workers' own loops).
    """

    def __init__(self, strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, *,
                 state: TrainState, named: NamedVariables, kind: str, skip_steps: int = 0, num_workers: int = 1,
                 sync_every: int | None = None) -> None:
        from strategies import make_coordinator

        super().__init__(strategy, step, global_step)
        self.sync_every, self.num_workers = sync_every, max(num_workers, 1)
        self.coordinator = make_coordinator(strategy)
        device = _device_of(global_step)
        with tf.device(device), tf.variable_creator_scope(named):
            self._totals = tf.Variable(tf.zeros([self.width], tf.float64), trainable=False, name="step_totals")
            self._ready = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="workers_ready")
        queue_name = f"{named.prefix}/tokens"
        with tf.device(device):
            # The op itself: eager ``tf.queue.FIFOQueue`` replaces the shared name with a unique one.
            self._queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]], capacity=_QUEUE_CAPACITY,
                                                 shared_name=queue_name)
            manifest = _manifest(state, named, kind=kind, width=self.width, start=skip_steps, totals=self._totals,
                                 ready=self._ready,
                                 queue_name=queue_name, queue_device=device)
            self._published = _variable(MANIFEST, tf.string, tf.TensorShape([]), trainable=False)
            tf.raw_ops.AssignVariableOp(resource=self._published.handle, value=tf.constant(json.dumps(manifest)))
        self._step = self._target = int(global_step.numpy())
        self._seen = np.zeros([self.width], np.float64)
        self._pending = 0
        self._closed = False
        self._longest_gap = 0.0  # the longest the global step has stood still (seconds), for the stall check
        logger.info("between-graph steps: %d workers take step tokens from %s (%d variables named %s/*)",
                    self.num_workers, device, len(manifest["model"]), named.prefix)

    def _release(self, count: int, *, token: int = 0) -> None:
        if count > 0:
            tokens = tf.fill([count], tf.constant(token, tf.int64))
            tf.raw_ops.QueueEnqueueManyV2(handle=self._queue, components=[tokens])

    def run(self, num_steps: int) -> None:
        self._pending += num_steps

    def wait(self) -> np.ndarray:
        self._target += self._pending
        self._release(self._pending)
        self._pending = 0
        first, began = self._step, time.monotonic()
        last, since = first, began
        while True:
            step = int(self.global_step.numpy())
            if step >= self._target:
                break
            now = time.monotonic()
            # Sleep about half the time the steps left should take at the rate seen so far: few reads of
            # the global step (each an RPC to the ps), and the workers idle little at the chunk's end.
            rate = (step - first) / max(now - began, 1e-3)
            pause = min(max((self._target - step) / max(rate, 50.0) / 2, _MIN_POLL_SECS), _MAX_POLL_SECS)
            if step != last:
                self._longest_gap = max(self._longest_gap, now - since)
                last, since = step, now
            elif now - since > max(_STALL_SECS, _STALL_GAPS * self._longest_gap):
                self._check_workers_ready()
                left = int(tf.raw_ops.QueueSizeV2(handle=self._queue).numpy())
                logger.warning("between-graph steps: global step %d of %d, unchanged for %.0f s, %d tokens "
                               "queued%s", step, self._target, now - since, left,
                               "; releasing the missing tokens again (a worker was lost mid-step)" if left == 0
                               else "; are the workers running?")
                if left == 0:
                    self._release(self._target - step)
                since = now
            time.sleep(pause)
        self._step = step
        totals = self._totals.numpy()
        chunk, self._seen = totals - self._seen, totals
        return chunk

    def current_step(self) -> int:
        return self._step

    def _check_workers_ready(self) -> None:
        """A ``TrainingError`` if no worker has built its step loop (so none ever will take a token)."""
        if int(self._ready.numpy()) == 0:
            raise TrainingError(
                f"between_graph=True, but after {_STALL_SECS:.0f} s no worker has started its own step loop, so no "
                "step can run. Every worker must call fit(..., between_graph=True) itself: a script that serves "
                "its workers with run_role() (or strategies.serve) before fit leaves them only serving. Call fit "
                "in every task, or drop between_graph.", field="between_graph")

    def close(self) -> None:
        """Ends every worker's loop (one stop token each)."""
        if not self._closed:
            self._closed = True
            self._release(self.num_workers, token=STOP)


# --- the worker's side -----------------------------------------------------------------------------------------

def _open(spec: Mapping[str, Any], *, trainable: bool = False) -> tf.Variable:
    with v1.device(spec["device"]):
        return _variable(spec["name"], tf.as_dtype(spec["dtype"]), tf.TensorShape(spec["shape"]), trainable=trainable)


def _read_manifest(target: str, config: tf.compat.v1.ConfigProto, ps_device: str, *,
                   stop: threading.Event) -> dict[str, Any] | None:
    """Waits for the chief's manifest; None if ``stop`` is set first."""
    graph = tf.Graph()
    with graph.as_default(), v1.device(ps_device):
        handle = _variable(MANIFEST, tf.string, [], trainable=False).handle
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
        tokens = tf.queue.FIFOQueue(_QUEUE_CAPACITY, [tf.int64], shapes=[[]], shared_name=queue["name"],
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


def prefix() -> str:
    """A fresh name prefix for one chief's variables."""
    return f"tfdist_bg_{uuid.uuid4().hex[:8]}"
