"""Preemption for the graph-mode Estimator: the signal stops training after the running step, checkpointed.

The same protocol as ``toolkit.fit`` (docs/preemption.md), on a
``MonitoredTrainingSession``: ``PreemptionHook`` asks the session to stop
after the step in flight once the task got the preemption signal; closing the
session runs the chief's ``CheckpointSaverHook.end``, which saves at the global
step reached; then ``raise_if_preempted`` ends ``train()`` (and so
``train_and_evaluate``) with ``TrainingPreempted`` (exit code 143) instead of
going on to evaluate or export. A worker stops its own loop the same way and
leaves (its steps are in the ps variables); the chief's checkpoints keep the job.
"""
from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from toolkit.training.preemption import EXIT_PREEMPTED, TrainingPreempted, install, watcher

__all__ = ["PreemptionHook", "raise_if_preempted"]

logger = logging.getLogger(__name__)


class PreemptionHook(tf.compat.v1.train.SessionRunHook):
    """Requests the session's stop after the step during which the preemption signal came."""

    def __init__(self) -> None:
        install(watcher().options if watcher().installed else None, role="train")
        self._step: Any = None
        self._stopping = False

    def begin(self) -> None:
        self._step = tf.compat.v1.train.get_global_step()

    def after_run(self, run_context: Any, run_values: Any) -> None:
        w = watcher()
        if w.requested and not self._stopping:
            self._stopping = True
            step = run_context.session.run(self._step) if self._step is not None else None
            logger.warning("%s: stopping at global step %s, the step in flight when %s came (%.1f s ago)", w.task,
                        step, w.signal_name(), w.seconds_since())
            run_context.request_stop()


def raise_if_preempted(model_dir: str | None, task: str) -> None:
    """After the session closed: ``TrainingPreempted`` if this task was preempted (the chief's checkpoint is written).

    Raises:
        TrainingPreempted: the task got the preemption signal.
    """
    w = watcher()
    if not w.requested:
        return
    path = tf.train.latest_checkpoint(model_dir) if model_dir else None
    step = int(path.rsplit("-", 1)[1]) if path else None
    logger.warning("preempted (%s %.1f s ago): %s stopped after the step in flight; newest checkpoint %s; "
                   "exiting with %d", w.signal_name(), w.seconds_since(), task, path or "(none)", EXIT_PREEMPTED)
    w.done.set()
    raise TrainingPreempted(step)
