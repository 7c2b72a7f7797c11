"""Preemption for the graph-mode Estimator: the signal stops training after the running step, checkpointed.

The same protocol as ``toolkit.fit`` (docs/preemption.md), on a
``MonitoredTrainingSession``: ``PreemptionHook`` asks the session to stop
after the step in flight once the task got the preemption signal (or, on the
chief, once a preempted ps left its notice in the model directory); closing
the session runs the chief's ``CheckpointSaverHook.end``, which saves at the
global step reached; then ``raise_if_preempted`` ends ``train()`` (and so
``train_and_evaluate``) with ``TrainingPreempted`` (exit code 143) instead of
going on to evaluate or export. A worker stops its own loop the same way and
leaves (its steps are in the ps variables); the chief's checkpoints keep the job.
A ps (``arm_ps``) leaves that notice and keeps serving until the chief's
checkpoint lands, then exits 143.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf

from toolkit.training.preemption import EXIT_PREEMPTED, TrainingPreempted, install, take_notices, watcher

__all__ = ["PreemptionHook", "arm_ps", "raise_if_preempted"]

logger = logging.getLogger(__name__)

#: seconds between two looks into the model directory for a preempted ps's notice
_NOTICE_POLL = 0.1


class PreemptionHook(tf.compat.v1.train.SessionRunHook):
    """Requests the session's stop after the step during which the preemption signal came.

    Args:
        notices_in: the chief's model directory: a preempted ps's notice there
            stops training too (a ps holds variables, so the job cannot go on
            without it). None on other tasks.
    """

    def __init__(self, notices_in: str | None = None) -> None:
        install(watcher().options if watcher().installed else None, role="train")
        self._step: Any = None
        self._stopping = False
        self._notices_in = notices_in
        self._started = time.time()
        self._next_look = 0.0

    def begin(self) -> None:
        self._step = tf.compat.v1.train.get_global_step()

    def _ps_notices(self) -> list[str]:
        if self._notices_in is None or time.monotonic() < self._next_look:
            return []
        self._next_look = time.monotonic() + _NOTICE_POLL
        notices = take_notices(self._notices_in, since=self._started - 1.0)
        return [str(n.get("task")) for n in notices if str(n.get("task", "")).startswith("ps-")]

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self._stopping:
            return
        w = watcher()
        servers = [] if w.requested else self._ps_notices()
        if w.requested or servers:
            self._stopping = True
            w.stopped_for = servers
            step = run_context.session.run(self._step) if self._step is not None else None
            cause = (f"the step in flight when {w.signal_name()} came ({w.seconds_since():.1f} s ago)"
                     if w.requested else f"{', '.join(servers)} was preempted")
            logger.warning("%s: stopping at global step %s, %s", w.task, step, cause)
            run_context.request_stop()


def arm_ps(model_dir: str | None, task: str) -> None:
    """In a ps task, before it serves: on the signal it tells the chief and serves until the chief's checkpoint."""
    install(role="server", model_dir=model_dir or None, task=task)


def raise_if_preempted(model_dir: str | None, task: str) -> None:
    """After the session closed: ``TrainingPreempted`` if this task was preempted (the chief's checkpoint is written).

    Raises:
        TrainingPreempted: the task got the preemption signal, or (the chief) a ps's notice stopped it.
    """
    w = watcher()
    if not w.requested and not w.stopped_for:
        return
    path = tf.train.latest_checkpoint(model_dir) if model_dir else None
    step = int(path.rsplit("-", 1)[1]) if path else None
    why = (f"{w.signal_name()} {w.seconds_since():.1f} s ago" if w.requested
           else f"{', '.join(w.stopped_for)} preempted")
    logger.warning("preempted (%s): %s stopped after the step in flight; newest checkpoint %s; exiting with %d",
                   why, task, path or "(none)", EXIT_PREEMPTED)
    w.done.set()
    raise TrainingPreempted(step)
