"""Between-graph steps under parameter servers: the chief's side of ``fit``'s default runner there.

Under ``ClusterCoordinator`` each execution is a closure the chief sends a worker (a round trip
and a multi-device function call); in TF1's between-graph replication each worker is its own
client and runs its own graph. Here the chief keeps every duty of ``fit`` but the steps:

* its variables are *named* resources on the ps (``NamedVariables``: eager variables are
  anonymous), listed with the optimizer's class and config in a manifest on the first ps;
* each worker (``toolkit.training.between_graph_worker``) rebuilds model and optimizer on them
  in a ``tf.Graph`` and calls the same ``TrainStep`` as every other runner;
* steps run only with tokens (a number of steps each) from a queue on the first ps, as TF1's
  ``SyncReplicasOptimizer`` did: the chief releases exactly the steps the loop hands over and
  waits on the global step, so it ends exactly on epoch ends and checkpoint steps; closing the
  queue ends the workers' loops, and a worker lost mid-step has its tokens released again.

``runner_for`` decides: the default ``TrainStep`` (or a step that says how a worker rebuilds it:
``between_graph_spec`` on the chief, ``for_worker`` on the worker, as ``ShardedTrainStep`` does)
without ``sync``, with any Keras 3 optimizer, when every worker runs ``fit`` (each raises a flag
on its own device); otherwise the chief coordinates and the workers only serve.
"""
from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

# the manifest's place: the first ps, which every worker knows without reading anything (the global
# step, and with it the token queue, may be on any ps); shipped steps are published there too
from strategies._shipped_steps import MANIFEST_DEVICE
from toolkit._compat.tensorflow import named_variable
from toolkit.training.config import TrainingError
from toolkit.training.runners import RUNNERS, Runner, make_runner
from toolkit.training.state import GlobalStepSchedule, TrainState
from toolkit.training.step import TrainStep

__all__ = ["MANIFEST", "MANIFEST_DEVICE", "QUEUE_CAPACITY", "WORKER_FLAG", "BetweenGraphRunner", "NamedVariables",
           "prefix", "publish", "runner_for", "unsupported", "workers_stepping"]

logger = logging.getLogger(__name__)

#: the shared name of the manifest variable (a JSON string on the first ps)
MANIFEST = "tfdist_between_graph_manifest"
#: the shared name of a flag on each worker's own device: this worker runs fit's between-graph work
WORKER_FLAG = "tfdist_between_graph_worker"
#: how long the chief waits for every worker's flag before it coordinates the steps itself
_FLAG_WAIT_SECS = 5.0
QUEUE_CAPACITY = 2**31 - 1
#: the chief's sleeps between reads of the global step: long while many steps are left (each read is an RPC,
#: and the chief should use ~no CPU while the workers step), short near the chunk's end (workers idle there)
_MIN_POLL_SECS, _MAX_POLL_SECS = 0.001, 0.25
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
            variable = named_variable(name, initial.dtype, shape, trainable=_trainable(kwargs),
                                 synchronization=kwargs.get("synchronization"),
                                 aggregation=kwargs.get("aggregation"),
                                 distribute_strategy=kwargs.get("distribute_strategy"))
            tf.raw_ops.AssignVariableOp(resource=variable.handle, value=initial)
        self._names[id(variable.handle)] = name
        self._keep.append(variable)
        return variable

    def knows(self, variable: keras.Variable | tf.Variable) -> bool:
        """Whether ``variable`` is one of the named resources this creator made."""
        inner = variable.value if isinstance(variable, keras.Variable) else variable
        return id(inner.handle) in self._names

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


def _trainable(kwargs: Mapping[str, Any]) -> bool:
    """What ``tf.Variable`` makes of its ``trainable`` argument: None means True, unless read-synchronized.

    ``tf.Variable(...)`` passes ``trainable=None`` down the creator chain (Keras passes a bool). Taken as
    False, every variable created that way (a sharded table's shards) was invisible to the tape: its
    gradient was None and its optimizer skipped it, so the table never trained under parameter servers.
    """
    trainable = kwargs.get("trainable")
    if trainable is None:
        return kwargs.get("synchronization") != tf.VariableSynchronization.ON_READ
    return bool(trainable)


def _device_of(variable: keras.Variable | tf.Variable) -> str:
    inner = variable.value if isinstance(variable, keras.Variable) else variable
    return str(inner.handle.device)


def unsupported(step: TrainStep) -> str | None:
    """Why the workers cannot rebuild ``step`` (None: they can, with any Keras 3 optimizer)."""
    if type(step) is not TrainStep and not callable(getattr(type(step), "for_worker", None)):
        return f"train_step ({type(step).__name__})"
    if step.sync is not None:
        return "sync="
    try:
        json.dumps(_optimizer_spec(step.optimizer, None))
    except (TypeError, ValueError) as exc:
        return f"an optimizer whose config is not JSON ({exc})"
    return None


def _optimizer_spec(optimizer: keras.optimizers.Optimizer, named: NamedVariables | None) -> dict[str, Any]:
    """What a worker rebuilds the optimizer from: its class and config, and its variables (slots included)."""
    serialized = keras.optimizers.serialize(optimizer)
    rate = serialized["config"].get("learning_rate")
    follows = isinstance(rate, dict) and rate.get("class_name") == GlobalStepSchedule.__name__
    if follows:  # the schedule inside; the worker binds it to the global step again
        serialized["config"]["learning_rate"] = rate["config"]["schedule"]
    variables = [] if named is None else [named.describe(v) for v in optimizer.variables]
    return {"serialized": serialized, "follows_global_step": follows, "variables": variables}


def workers_stepping(num_workers: int, *, wait_secs: float = _FLAG_WAIT_SECS, flag: str = WORKER_FLAG) -> bool:
    """Whether every worker runs ``fit``'s between-graph work (raised ``flag``), waiting up to ``wait_secs``.

    A worker that only serves (a script that calls ``run_role()`` before ``fit``) never raises ``WORKER_FLAG``;
    it raises ``strategies._shipped_steps.SHIPPED_FLAG`` instead (it runs the graphs a chief ships).
    """
    flags = []
    for index in range(num_workers):
        with tf.device(f"/job:worker/replica:0/task:{index}"):
            flags.append(named_variable(flag, tf.int64, tf.TensorShape([]), trainable=False))
    deadline = time.monotonic() + wait_secs
    while True:
        raised = [bool(tf.raw_ops.VarIsInitializedOp(resource=flag.handle).numpy()) for flag in flags]
        if all(raised) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if not all(raised):
        logger.info("between-graph steps: worker(s) %s serve only; the chief coordinates the steps",
                    [i for i, up in enumerate(raised) if not up])
    return all(raised)


def publish(name: str, value: bytes | str) -> None:
    """Sets the named string variable ``name`` on the first ps (``MANIFEST_DEVICE``) to ``value``."""
    with tf.device(MANIFEST_DEVICE):
        published = named_variable(name, tf.string, tf.TensorShape([]), trainable=False)
        tf.raw_ops.AssignVariableOp(resource=published.handle, value=tf.constant(value))


def _publish(manifest: Mapping[str, Any]) -> None:
    publish(MANIFEST, json.dumps(manifest))


def runner_for(state: TrainState, step: TrainStep, named: NamedVariables, *, workers: int,
               steps_per_execution: int, required: bool) -> Callable[..., Runner] | None:
    """The between-graph runner for ``step`` if it can run (None: the coordinator runs it).

    ``required`` (``FitOptions.between_graph=True``) turns a step it cannot run into a ``TrainingError``;
    otherwise it is used when every worker runs ``fit``'s work.
    """
    reason = unsupported(step)
    if reason is not None and required:
        raise TrainingError(f"between_graph=True builds the default TrainStep on each worker; it cannot run "
                            f"{reason}. Drop between_graph (the coordinator runs it).", field="between_graph")
    if reason is None and (required or workers_stepping(workers)):
        return functools.partial(make_runner, kind="between_graph", state=state, named=named,
                                 steps_per_execution=steps_per_execution)
    if reason is not None:
        logger.info("between-graph steps cannot run %s; the chief coordinates the steps", reason)
    _publish({"mode": "coordinator"})  # workers waiting for a manifest serve only
    return None


class BetweenGraphRunner(Runner):
    """The chief's side: releases step tokens, waits on the global step, reads the totals.

    A token lets a worker run that many steps (at most ``steps_per_execution``) in one ``session.run``.
    ``coordinator`` is the strategy's ``ClusterCoordinator``, kept for the workers' validation
    closures (which run beside the workers' own loops).
    """

    def __init__(self, strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, *,
                 state: TrainState, named: NamedVariables, steps_per_execution: int = 1, skip_steps: int = 0,
                 num_workers: int = 1, sync_every: int | None = None) -> None:
        from strategies import make_coordinator

        super().__init__(strategy, step, global_step)
        self.sync_every, self.num_workers = sync_every, max(num_workers, 1)
        self.steps_per_execution = max(int(steps_per_execution), 1)
        self.coordinator = make_coordinator(strategy)
        device = _device_of(global_step)
        with tf.device(device), tf.variable_creator_scope(named):
            self._totals = tf.Variable(tf.zeros([self.width], tf.float64), trainable=False, name="step_totals")
            self._ready = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="workers_ready")
        queue_name = f"{named.prefix}/tokens/{uuid.uuid4().hex[:8]}"  # a closed queue stays closed: one per run
        with tf.device(device):
            # The op itself: eager ``tf.queue.FIFOQueue`` replaces the shared name with a unique one.
            self._queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]], capacity=QUEUE_CAPACITY,
                                                 shared_name=queue_name)
        manifest: dict[str, Any] = {
            "mode": "between_graph",
            "optimizer": _optimizer_spec(state.optimizer, named),
            "model": [named.describe(v) for v in state.model.variables],
            "global_step": named.describe(global_step),
            "totals": named.describe(self._totals),
            "ready": named.describe(self._ready),
            "width": self.width,
            "start": skip_steps,
            "steps_per_execution": self.steps_per_execution,
            "queue": {"name": queue_name, "device": device},
        }
        spec = getattr(step, "between_graph_spec", None)
        if callable(spec):  # a step the workers rebuild from more than model and optimizer (sharded tables)
            manifest.update(spec(named))
        _publish(manifest)
        self.manifest = manifest
        self._step = self._target = int(global_step.numpy())
        self._seen = np.zeros([self.width], np.float64)
        self._pending = 0
        self._closed = False
        self._longest_gap = 0.0  # the longest the global step has stood still (seconds), for the stall check
        logger.info("between-graph steps: %d workers take step tokens from %s (%d variables named %s/*, up to %d "
                    "steps per token)", self.num_workers, device, len(manifest["model"]), named.prefix,
                    self.steps_per_execution)

    def _release(self, count: int) -> None:
        """Tokens for ``count`` steps: as many full executions as fit, then the rest."""
        if count > 0:
            full, rest = divmod(count, self.steps_per_execution)
            tokens = [self.steps_per_execution] * full + ([rest] if rest else [])
            tf.raw_ops.QueueEnqueueManyV2(handle=self._queue, components=[tf.constant(tokens, tf.int64)])

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
                f"between-graph steps: after {_STALL_SECS:.0f} s no worker has started its own step loop, so no "
                "step can run. Every worker must call fit itself: a script that serves its workers with "
                "run_role() (or strategies.serve) before fit leaves them only serving. Call fit in every task, or "
                "pass FitOptions(between_graph=False) to have the chief coordinate.", field="between_graph")

    def close(self) -> None:
        """Ends every worker's loop: a closed, empty queue fails their next dequeue."""
        if not self._closed:
            self._closed = True
            tf.raw_ops.QueueCloseV2(handle=self._queue, cancel_pending_enqueues=False)


def prefix() -> str:
    """A fresh name prefix for one chief's variables."""
    return f"tfdist_bg_{uuid.uuid4().hex[:8]}"


RUNNERS["between_graph"] = BetweenGraphRunner
