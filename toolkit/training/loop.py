"""The epoch/step loop shared by every strategy.

The loop only counts steps and calls hooks; *how* steps run is the runner's
business and *what happens around them* (checkpoints, summaries, progress,
Keras callbacks, export) is the hooks'. Hooks are plain callables receiving a
``LoopEvent``, so higher layers add duties without subclassing anything.

Work is handed to the runner in chunks that end exactly on epoch ends and on
checkpoint steps, so a checkpoint's global step is always a multiple of the
checkpoint interval and a resumed run replays the same batches.

After each wait the loop takes the global step *variable* as the truth (not
its own count of what it handed over), so checkpoints, progress, epochs and
resume all use the number of updates actually counted. Under parameter
servers a closure runs at least once: if a worker is lost after a closure's
updates landed, the closure runs again and its steps count twice, so the
final step can exceed ``total_steps`` by the steps of such closures. If steps
went missing, the loop schedules more until the target is reached.

After every chunk (and once before the first) the loop asks
``toolkit.training.preemption_loop.LoopPreemption`` whether a task of the job
was preempted: if so it checkpoints at that step and raises
``TrainingPreempted`` (exit code ``EXIT_PREEMPTED``) instead of going on.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from toolkit.training.options import FitConfig
from toolkit.training.runners import Runner
from toolkit.training.step import StatLayout

__all__ = ["EVENT_KINDS", "LoopEvent", "Hook", "LoopRecord", "run_loop"]

logger = logging.getLogger(__name__)

EVENT_KINDS = ("train_begin", "epoch_begin", "steps_begin", "steps_end", "epoch_end", "train_end")


@dataclasses.dataclass(frozen=True)
class LoopEvent:
    """What just happened in the loop.

    Attributes:
        kind: one of ``EVENT_KINDS``.
        step: the global step (optimizer steps taken so far, all workers).
        epoch: zero-based epoch index.
        epoch_step: steps done in this epoch.
        logs: running means over the epoch (``loss`` and metrics); at
            ``epoch_end`` also the ``val_`` metrics.
        rates: ``steps_per_sec`` and ``examples_per_sec`` since the epoch began.
    """

    kind: str
    step: int
    epoch: int
    epoch_step: int = 0
    logs: Mapping[str, float] = dataclasses.field(default_factory=dict)
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)


Hook = Callable[[LoopEvent], None]


@dataclasses.dataclass
class LoopRecord:
    """What the loop returns: per-epoch logs and throughput."""

    history: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    epochs: list[int] = dataclasses.field(default_factory=list)
    rates: list[dict[str, float]] = dataclasses.field(default_factory=list)
    final_step: int = 0
    stopped_early: bool = False

    def add(self, epoch: int, logs: Mapping[str, float], rates: Mapping[str, float]) -> None:
        self.epochs.append(epoch)
        self.rates.append(dict(rates))
        for name, value in logs.items():
            self.history.setdefault(name, []).append(value)


class _Clock:
    """Throughput since the epoch began."""

    def __init__(self, step: int) -> None:
        self.start, self.first_step, self.examples = time.monotonic(), step, 0.0

    def rates(self, step: int) -> dict[str, float]:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        return {"steps_per_sec": (step - self.first_step) / elapsed, "examples_per_sec": self.examples / elapsed}


def _chunk_end(step: int, epoch_end: int, config: FitConfig, runner: Runner) -> int:
    """The next step at which the loop must wait: epoch end, checkpoint step, or sync point."""
    interval = config.checkpoint_interval
    next_checkpoint = (step // interval + 1) * interval
    per_execution = config.steps_per_execution
    sync = -(-(runner.sync_every or per_execution) // per_execution) * per_execution  # whole executions only
    return min(epoch_end, next_checkpoint, step + sync)


def _emit(hooks: Sequence[Hook], event: LoopEvent) -> None:
    for hook in hooks:
        hook(event)


def run_loop(runner: Runner, *, config: FitConfig, layout: StatLayout, start_step: int, hooks: Sequence[Hook],
             validate: Callable[[], Mapping[str, float]] | None = None,
             stop_requested: Callable[[], bool] = lambda: False,
             check_preemption: Callable[[int], None] = lambda step: None) -> LoopRecord:
    """Trains from ``start_step`` to ``config.total_steps`` (or until a hook asks to stop).

    Args:
        runner: runs the steps (``SyncRunner`` or ``ParameterServerRunner``).
        config: epochs, steps per epoch and execution, checkpoint interval.
        layout: how to turn the runner's summed stats into logs.
        start_step: the restored global step; the loop resumes mid-epoch if needed.
        hooks: called with every ``LoopEvent``, in order.
        validate: returns ``val_`` logs at each epoch end (the chief's job).
        stop_requested: polled after each chunk (single-controller runners) and
            at epoch ends, where multi-worker runners agree on it (a Keras
            callback setting ``model.stop_training``).
        check_preemption: called with the global step at the start and after
            each chunk; raises ``TrainingPreempted`` when the job must stop
            (``toolkit.training.preemption_loop.LoopPreemption.check``).
    """
    record, step = LoopRecord(final_step=start_step), start_step
    _emit(hooks, LoopEvent("train_begin", step, step // config.steps_per_epoch))
    check_preemption(step)
    for epoch in range(step // config.steps_per_epoch, config.epochs):
        epoch_end = (epoch + 1) * config.steps_per_epoch
        totals, clock = np.zeros([layout.width]), _Clock(step)
        _emit(hooks, LoopEvent("epoch_begin", step, epoch, step - epoch * config.steps_per_epoch))
        stop = False
        while step < epoch_end and not stop:
            target = _chunk_end(step, epoch_end, config, runner)
            _emit(hooks, LoopEvent("steps_begin", step, epoch, step - epoch * config.steps_per_epoch))
            planned = step
            while planned < target:
                count = min(config.steps_per_execution, target - planned)
                runner.run(count)
                planned += count
            chunk = runner.wait()
            step = runner.current_step()  # the variable, not the plan: closures run at least once
            totals += chunk
            clock.examples += float(chunk[0])
            _emit(hooks, LoopEvent("steps_end", step, epoch, step - epoch * config.steps_per_epoch,
                                   layout.to_logs(totals), clock.rates(step)))
            check_preemption(step)
            stop = runner.single_controller and stop_requested()
        logs, rates = layout.to_logs(totals), clock.rates(step)
        if validate is not None:
            logs.update(validate())
        _emit(hooks, LoopEvent("epoch_end", step, epoch, step - epoch * config.steps_per_epoch, logs, rates))
        record.add(epoch, logs, rates)
        record.final_step = step
        if runner.agree(stop_requested()):
            record.stopped_early = step < config.total_steps
            break
    _emit(hooks, LoopEvent("train_end", step, max(record.epochs, default=0),
                           logs=dict(zip(record.history, (v[-1] for v in record.history.values()), strict=False))))
    return record
