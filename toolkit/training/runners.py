"""Runners: how one strategy executes ``steps_per_execution`` steps at a time.

Both runners trace the same ``tf.function``: ``steps_per_execution`` times, it
pulls a batch, runs the replica step through ``strategy.run`` and sums the
replicas' stats; then it advances the global step by the number of steps.
They differ in who runs it:

* ``SyncRunner`` (default, one_device, mirrored, multi_worker_mirrored): every
  task calls the function itself; gradients are all-reduced inside the step.
  With several workers each execution also carries the task's preemption flag
  (``Runner.flag``) in its stats' all-reduce, so every worker reads the same
  vote from the same execution (``Runner.flagged``).
* ``ParameterServerRunner`` (parameter_server): the coordinator ``schedule``\\ s
  the function as a closure on whichever worker is free, over a per-worker
  iterator, and collects the stats from the closures' return values at
  ``wait()`` (which joins). Several steps per closure amortise the RPCs.
* ``BetweenGraphRunner`` (parameter_server, ``fit``'s default where it can run the step;
  ``toolkit.training.between_graph``): each worker runs the same step in its own graph-mode
  loop on the ps variables, and the chief only releases step tokens.
* ``SyncParameterServerRunner`` (parameter_server with ``FitOptions.sync``):
  the same, but each step is one contribution to a ``SyncReplicas``
  aggregator, which advances the global step itself once per
  ``replicas_to_aggregate`` fresh contributions; the runner tops up the
  contributions until the global step reaches the loop's target exactly.

``make_runner`` picks one through ``RUNNERS``, keyed by ``strategy_kind``
(prefixed ``sync_`` when the step carries a ``SyncReplicas``).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from toolkit.training.config import TrainingError
from toolkit.training.step import Nest, TrainStep

__all__ = ["Runner", "SyncRunner", "ParameterServerRunner", "SyncParameterServerRunner", "RUNNERS", "make_runner",
           "strategy_kind"]

logger = logging.getLogger(__name__)

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]

#: executions of at most this many steps are traced without a loop; longer ones loop over this many
#: straight steps per iteration (see ``Runner._call``).
UNROLL_LIMIT = 8


def strategy_kind(strategy: tf.distribute.Strategy) -> str:
    """``"parameter_server"`` for ParameterServerStrategy, ``"sync"`` for every other strategy."""
    return "parameter_server" if isinstance(strategy, tf.distribute.ParameterServerStrategy) else "sync"


def _skipping(dataset_fn: DatasetFn, batches: int) -> DatasetFn:
    """Resumes an input pipeline where a restored run left it (same seed, same order)."""
    if batches <= 0:
        return dataset_fn
    return lambda context: dataset_fn(context).skip(batches)


def _check_batch(batch: object) -> tuple[Nest, Nest]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TrainingError(
            "`dataset_fn` must return a dataset of (features, labels) pairs; its elements are "
            f"{type(batch).__name__}{'' if not isinstance(batch, (tuple, list)) else f' of length {len(batch)}'}. "
            "Map it with `.map(lambda example: (example['image'], example['label']))`.",
            field="dataset_fn",
        )
    return batch[0], batch[1]


class Runner:
    """Runs training steps; ``run`` starts them, ``wait`` returns their summed stats."""

    #: steps the loop hands over between ``wait`` calls (None: one execution).
    sync_every: int | None = None
    #: True when only this process runs the loop, so it may stop at any chunk.
    single_controller: bool = True

    def __init__(self, strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable) -> None:
        self.strategy, self.step, self.global_step = strategy, step, global_step
        self.width = step.layout.width
        self._iterator: Iterator[Nest] | None = None  # set by subclasses
        # Without the optional flag: ``ClusterCoordinator.schedule`` binds positional arguments only.
        self._looped = tf.function(lambda iterator, num_steps: self._loop(iterator, num_steps))
        self._unrolled: dict[int, Callable[..., tf.Tensor]] = {}
        self._counts: dict[int, tf.Tensor] = {}
        #: this task's preemption flag, read as each execution starts (``LoopPreemption`` sets it)
        self.flag: Callable[[], bool] = lambda: False

    def _one(self, iterator: Iterator[Nest], flag: tf.Tensor | None = None) -> tf.Tensor:
        """One step's stats summed over the replicas; with ``flag``, one more entry: the sum of every replica's flag.

        The flag joins the stats inside the replica step, so it travels in the all-reduce the stats take
        anyway: no collective of its own, and every task reads the same sum.
        """
        features, labels = _check_batch(next(iterator))
        if flag is None:
            per_replica = self.strategy.run(self.step, args=(features, labels))
        else:
            per_replica = self.strategy.run(
                lambda features, labels: tf.concat([self.step(features, labels), tf.reshape(flag, [1])], 0),
                args=(features, labels))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _width(self, flag: tf.Tensor | None) -> int:
        return self.width if flag is None else self.width + 1

    def _straight(self, iterator: Iterator[Nest], *, num_steps: int, flag: tf.Tensor | None = None) -> tf.Tensor:
        totals = tf.zeros([self._width(flag)], tf.float32)
        for _ in range(num_steps):  # a Python loop: traced into num_steps copies of the step
            totals += self._one(iterator, flag)
        return self._advance(num_steps, totals)

    def _advance(self, num_steps: int | tf.Tensor, totals: tf.Tensor) -> tf.Tensor:
        """Counts the steps just run, after their updates (``totals`` depends on every one).

        A step whose ``counts_steps`` is False advances the global step itself.
        """
        if not self.step.counts_steps:
            return totals
        with tf.control_dependencies([totals]):
            counted = self.global_step.assign_add(tf.cast(num_steps, tf.int64))
        with tf.control_dependencies([counted]):
            return tf.identity(totals)

    def _straight_for(self, num_steps: int) -> Callable[[Iterator[Nest]], tf.Tensor]:
        # A closure taking only the iterator: the coordinator calls traced functions with positional args only.
        return lambda iterator: self._straight(iterator, num_steps=num_steps)

    def _loop(self, iterator: Iterator[Nest], num_steps: tf.Tensor, flag: tf.Tensor | None = None) -> tf.Tensor:
        totals = tf.zeros([self._width(flag)], tf.float32)
        for _ in tf.range(num_steps // UNROLL_LIMIT):
            for _ in range(UNROLL_LIMIT):  # a Python loop: UNROLL_LIMIT straight steps per iteration
                totals += self._one(iterator, flag)
        for _ in tf.range(num_steps % UNROLL_LIMIT):  # the rest, one step per iteration
            totals += self._one(iterator, flag)
        return self._advance(num_steps, totals)

    def _call(self, num_steps: int) -> tuple[Callable[..., tf.Tensor], tuple[object, ...]]:
        """The traced function for ``num_steps`` steps and its arguments.

        Up to ``UNROLL_LIMIT`` steps are traced straight (one function per
        count): a ``tf.while_loop`` whose body reads and updates variables on
        other tasks costs a lot per iteration. Longer executions share one
        function that loops over ``UNROLL_LIMIT`` straight steps per iteration
        (and one step per iteration for the rest), so the graph a chief traces
        and every worker instantiates holds at most ``UNROLL_LIMIT + 1`` copies
        of the step however long the execution.
        """
        if num_steps <= UNROLL_LIMIT:
            if num_steps not in self._unrolled:
                self._unrolled[num_steps] = tf.function(self._straight_for(num_steps))
            return self._unrolled[num_steps], (self._iterator,)
        if num_steps not in self._counts:
            self._counts[num_steps] = tf.constant(num_steps, tf.int64)
        return self._looped, (self._iterator, self._counts[num_steps])

    def run(self, num_steps: int) -> None:
        raise NotImplementedError

    def wait(self) -> np.ndarray:
        raise NotImplementedError

    def current_step(self) -> int:
        """The global step variable, read after ``wait``: the one count the loop, checkpoints and resume use.

        Under parameter servers it may exceed the steps the loop handed over:
        ``ClusterCoordinator`` runs a closure *at least once*, so a worker
        lost after its updates landed but before its result came back has
        that closure run again (its updates applied, and counted, twice).
        """
        return int(self.global_step.numpy())

    def agree(self, flag: bool) -> bool:
        """Whether any task raised ``flag``; only multi-worker runners need to ask the others (a collective)."""
        return flag

    def flagged(self) -> bool:
        """Whether any task's ``flag`` is up.

        One controller asks its own flag. Workers that all run the loop read the vote their executions
        up to the last ``wait`` carried, which is the same on every worker at the same step.
        """
        return self.flag()

    def sync_stats(self) -> dict[str, int]:
        """Synchronous-update counters (empty unless updates are aggregated)."""
        return {}

    def close(self) -> None:
        """Called once the loop is over (a runner whose workers loop by themselves ends them here)."""


class SyncRunner(Runner):
    """Every task runs the loop; one ``tf.function`` call per execution.

    ``dataset_fn`` may also be a ``tf.data.Dataset`` of global batches, which is
    distributed the way Keras distributes one (``experimental_distribute_dataset``).
    """

    def __init__(self, strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, *,
                 dataset_fn: DatasetFn, skip_steps: int = 0, num_workers: int = 1,
                 sync_every: int | None = None) -> None:
        super().__init__(strategy, step, global_step)
        self.num_workers = num_workers  # ``sync_every`` is ignored: results are ready after each call
        self.single_controller = num_workers <= 1
        # Several workers vote with every execution: each passes its flag in, and its stats come back with
        # the sum (the last entry, taken off by ``wait``).
        self._flags = None if self.single_controller else (tf.constant(0.0), tf.constant(1.0))
        if self._flags is not None:
            self._looped = tf.function(self._loop)  # takes the flag as its third argument
        self._votes = 0.0
        if isinstance(dataset_fn, tf.data.Dataset):
            # A dataset of global batches: TensorFlow shards it per worker (honouring its
            # auto_shard_policy) and splits each batch over the replicas.
            dataset = strategy.experimental_distribute_dataset(dataset_fn.skip(skip_steps))
        else:
            # Each step takes one batch per replica from this task's pipeline.
            per_pipeline = max(strategy.num_replicas_in_sync // num_workers, 1)
            dataset = strategy.distribute_datasets_from_function(_skipping(dataset_fn, skip_steps * per_pipeline))
        self._iterator = iter(dataset)
        self._pending: list[tf.Tensor] = []
        # Every execution here runs exactly once, so the global step is known without reading it back.
        self._step = int(global_step.numpy()) if step.counts_steps else None

    def _call(self, num_steps: int) -> tuple[Callable[..., tf.Tensor], tuple[object, ...]]:
        """As ``Runner._call``, but a short execution captures the iterator instead of taking it.

        Turning a distributed iterator into its tensors costs on every call; a coordinator,
        though, needs the iterator as an argument. With several workers the arguments end with
        this task's preemption flag, read now (``Runner._one`` says where it goes).
        """
        flag = () if self._flags is None else (self._flags[bool(self.flag())],)  # a tensor: no retrace
        if num_steps > UNROLL_LIMIT:
            function, args = super()._call(num_steps)
            return function, args + flag
        if num_steps not in self._unrolled:
            iterator = self._iterator
            assert iterator is not None  # set in __init__
            self._unrolled[num_steps] = tf.function(
                lambda flag=None: self._straight(iterator, num_steps=num_steps, flag=flag))
        return self._unrolled[num_steps], flag

    def run(self, num_steps: int) -> None:
        function, args = self._call(num_steps)
        self._pending.append(function(*args))
        if self._step is not None:
            self._step += num_steps

    def current_step(self) -> int:
        """The global step: the restored one plus the steps run since, which is what the variable holds."""
        return super().current_step() if self._step is None else self._step

    def wait(self) -> np.ndarray:
        totals = np.zeros([self.width + (self._flags is not None)], np.float64)
        for stats in self._pending:
            totals += stats.numpy()
        self._pending.clear()
        if self._flags is None:
            return totals
        self._votes = float(totals[-1])
        return totals[:-1]

    def flagged(self) -> bool:
        return self.flag() if self._flags is None else self._votes > 0

    def agree(self, flag: bool) -> bool:
        if self.num_workers <= 1:
            return flag
        votes = self.strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(1.0 if flag else 0.0))
        return float(self.strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None)) > 0


def sum_fetched(remotes: list[tf.distribute.experimental.coordinator.RemoteValue], width: int) -> np.ndarray:
    """The float64 sum of the stats vectors (``width`` long) that closures returned as ``remotes``."""
    totals = np.zeros([width], np.float64)
    for remote in remotes:
        totals += remote.fetch()
    return totals


class ParameterServerRunner(Runner):
    """The coordinator schedules closures of ``num_steps`` steps on free workers.

    Each worker reads its own shard: the input context handed to ``dataset_fn``
    says there are ``num_workers`` pipelines and carries the worker's index
    (a tensor resolved when the worker runs the dataset function).
    """

    def __init__(self, strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, *,
                 dataset_fn: DatasetFn, skip_steps: int = 0, num_workers: int = 1,
                 sync_every: int | None = None) -> None:
        from strategies import make_coordinator

        super().__init__(strategy, step, global_step)
        self.sync_every = sync_every
        self.coordinator = make_coordinator(strategy)
        # Workers race, so the split of past steps between them is only known on average.
        per_worker_fn = _skipping(dataset_fn, skip_steps // max(num_workers, 1) * strategy.num_replicas_in_sync)

        def worker_dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            sharded = tf.distribute.InputContext(num_input_pipelines=num_workers, input_pipeline_id=worker,
                                                 num_replicas_in_sync=context.num_replicas_in_sync)
            return per_worker_fn(sharded)

        @tf.function
        def per_worker_dataset() -> tf.distribute.DistributedDataset:
            return strategy.distribute_datasets_from_function(worker_dataset_fn)

        self._iterator = iter(self.coordinator.create_per_worker_dataset(per_worker_dataset))
        self._pending: list[tf.distribute.experimental.coordinator.RemoteValue] = []
        self._cold_workers = num_workers  # workers that have not run the looped execution yet

    def run(self, num_steps: int) -> None:
        function, args = self._call(num_steps)
        if function is self._looped and self._cold_workers > 1:
            self._warm_up()
        self._pending.append(self.coordinator.schedule(function, args=args))

    def _warm_up(self) -> None:
        """With the first looped execution, has every other worker instantiate it too, running no step.

        A worker's first closure of a function instantiates its graph, which takes seconds. Without
        this the second worker paid it in the middle of training, and a preemption signal that
        landed then waited for it (docs/preemption.md).
        """
        none = tf.constant(0, tf.int64)
        for _ in range(self._cold_workers - 1):
            self.coordinator.schedule(self._looped, args=(self._iterator, none))
        self._cold_workers = 0

    def wait(self) -> np.ndarray:
        self.coordinator.join()
        totals = sum_fetched(self._pending, self.width)
        self._pending.clear()
        return totals


class SyncParameterServerRunner(ParameterServerRunner):
    """Synchronous parameter-server training: ``run(n)`` means *n more global steps*.

    A global step needs ``replicas_to_aggregate`` (N) fresh contributions, and a
    contribution is dropped when an update lands while it is being computed, so
    the number of worker steps a global step costs is only known afterwards.
    ``run(n)`` schedules ``n * N`` contributions at once (every worker busy);
    ``wait`` joins, reads the real global step and schedules ``(target - step)
    * N`` more until the target is reached. That can never overshoot: at most
    N - 1 contributions are pending from before, so ``k * N`` new ones make at
    most ``k`` updates. The stats count every contribution, stale ones included
    (their loss was computed), so logged means are over contributions.
    """

    def __init__(self, strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, *,
                 dataset_fn: DatasetFn, skip_steps: int = 0, num_workers: int = 1,
                 sync_every: int | None = None) -> None:
        if step.sync is None:
            raise TrainingError("SyncParameterServerRunner needs a TrainStep built with sync=SyncReplicas(...); "
                                "pass fit(options=FitOptions(sync=SyncConfig())).", field="sync")
        self.sync = step.sync
        self.aggregate = self.sync.replicas_to_aggregate
        # A global step consumed about N batches (stale contributions make it an estimate).
        super().__init__(strategy, step, global_step, dataset_fn=dataset_fn, skip_steps=skip_steps * self.aggregate,
                         num_workers=num_workers, sync_every=sync_every)
        self.start = self._target = skip_steps
        self.contributions = 0
        self._per_call = 1

    def _schedule(self, contributions: int) -> None:
        while contributions > 0:
            count = min(self._per_call, contributions)
            function, args = self._call(count)
            self._pending.append(self.coordinator.schedule(function, args=args))
            contributions -= count
            self.contributions += count

    def run(self, num_steps: int) -> None:
        self._per_call = max(self._per_call, num_steps)
        self._target += num_steps
        self._schedule(num_steps * self.aggregate)

    def wait(self) -> np.ndarray:
        self.coordinator.join()
        done = int(self.global_step.numpy())
        while done < self._target:
            logger.debug("global step %d of %d; scheduling %d more contributions", done, self._target,
                         (self._target - done) * self.aggregate)
            self._schedule((self._target - done) * self.aggregate)
            self.coordinator.join()
            done = int(self.global_step.numpy())
        if done != self._target:
            raise RuntimeError(f"synchronous updates overshot: global step {done}, expected {self._target}")
        return super().wait()

    def sync_stats(self) -> dict[str, int]:
        """Contributions scheduled by this run and what became of them.

        Always ``contributions == replicas_to_aggregate * updates + stale + pending``.
        """
        return {"replicas_to_aggregate": self.aggregate, "contributions": self.contributions,
                "updates": int(self.global_step.numpy()) - self.start, "stale": int(self.sync.stale.numpy()),
                "pending": int(self.sync.pending.numpy())}


#: runners by kind; ``toolkit.training.between_graph`` adds ``between_graph`` (workers that run their own steps).
RUNNERS: dict[str, type[Runner]] = {"sync": SyncRunner, "parameter_server": ParameterServerRunner,
                                    "sync_parameter_server": SyncParameterServerRunner}


def make_runner(strategy: tf.distribute.Strategy, step: TrainStep, global_step: tf.Variable, *,
                kind: str | None = None, **kwargs: Any) -> Runner:
    """The runner of ``kind`` (None: ``strategy``'s kind, ``sync_`` + kind if ``step.sync`` is set); ``kwargs``
    go to it."""
    if kind is None:
        kind = strategy_kind(strategy)
        if getattr(step, "sync", None) is not None:
            kind = f"sync_{kind}"
    runner_cls = RUNNERS.get(kind)
    if runner_cls is None:
        raise TrainingError(f"No runner for strategy kind {kind!r}; known kinds: {', '.join(RUNNERS)}.",
                            field="strategy")
    return runner_cls(strategy, step, global_step, **kwargs)
