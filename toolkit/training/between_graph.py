"""Between-graph steps under parameter servers, ``fit(..., options=FitOptions(between_graph=True))``: the chief's side.

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
* Each worker (``toolkit.training.between_graph_worker``) reads the manifest,
  builds ``model_fn()`` in a ``tf.Graph``,
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
import time
import uuid
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from toolkit._compat.tensorflow import named_variable
from toolkit.training.config import TrainingError
from toolkit.training.runners import Runner
from toolkit.training.state import GlobalStepSchedule, TrainState
from toolkit.training.step import TrainStep

__all__ = ["MANIFEST", "QUEUE_CAPACITY", "STOP", "BetweenGraphRunner", "NamedVariables", "check_flag",
           "check_supported", "hyperparameters", "prefix", "slots_of"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

#: the shared name of the manifest variable (a JSON string on the first ps)
MANIFEST = "tfdist_between_graph_manifest"
#: a token that ends a worker's loop instead of allowing a step
STOP = -1
QUEUE_CAPACITY = 2**31 - 1
_MIN_POLL_SECS, _MAX_POLL_SECS = 0.001, 0.05
#: a wait that sees no step for this long, and at least _STALL_GAPS times the longest pause between steps so far,
#: with no token left, re-releases the missing tokens (a worker lost mid-step took its token with it)
_STALL_SECS, _STALL_GAPS = 30.0, 10


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
            variable = named_variable(name, initial.dtype, shape, trainable=bool(kwargs.get("trainable", True)),
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


def check_flag(value: bool, steps_per_execution: int | None) -> bool:
    """``FitOptions.between_graph`` (a bool, checked there) holds only with one step per execution."""
    if value and steps_per_execution not in (None, 1):
        raise TrainingError(
            f"between_graph=True runs one step per session.run on each worker, but steps_per_execution="
            f"{steps_per_execution!r}. Drop steps_per_execution (or pass 1), or drop FitOptions.between_graph to run "
            "several steps per coordinator closure.", field="steps_per_execution")
    return value


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
            self._queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]], capacity=QUEUE_CAPACITY,
                                                 shared_name=queue_name)
            manifest = _manifest(state, named, kind=kind, width=self.width, start=skip_steps, totals=self._totals,
                                 ready=self._ready,
                                 queue_name=queue_name, queue_device=device)
            self._published = named_variable(MANIFEST, tf.string, tf.TensorShape([]), trainable=False)
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
                "step can run. Every worker must call fit(..., options=FitOptions(between_graph=True)) itself: a "
                "script that serves its workers with run_role() (or strategies.serve) before fit leaves them only "
                "serving. Call fit in every task, or drop FitOptions.between_graph.", field="between_graph")

    def close(self) -> None:
        """Ends every worker's loop (one stop token each)."""
        if not self._closed:
            self._closed = True
            self._release(self.num_workers, token=STOP)


def prefix() -> str:
    """A fresh name prefix for one chief's variables."""
    return f"tfdist_bg_{uuid.uuid4().hex[:8]}"
