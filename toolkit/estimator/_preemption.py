"""Preemption for the graph-mode Estimator: the signal stops training after the running step, checkpointed.

The same protocol as ``toolkit.fit`` (docs/preemption.md), on a
``MonitoredTrainingSession``: ``PreemptionHook`` asks the session to stop
after the step in flight once the task got the preemption signal (or, on the
chief, once a preempted ps told it so through the cluster); closing the
session runs the chief's ``CheckpointSaverHook.end``, which saves at the
global step reached; then ``raise_if_preempted`` has the chief say goodbye to
its ps tasks with 143 and ends ``train()`` (and so ``train_and_evaluate``) with
``TrainingPreempted`` (exit code 143) instead of going on to evaluate or
export. A worker stops its own loop the same way and leaves (its steps are in
the ps variables); the chief's checkpoints keep the job. A ps is a server like
any other (``strategies._server_preemption``): on the signal it tells the chief
and serves on until that goodbye. The same hook serves a TF1 script's
``MonitoredTrainingSession`` (``toolkit.compat``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.training.preemption import EXIT_PREEMPTED, TrainingPreempted, install, watcher

__all__ = ["PreemptionHook", "raise_if_preempted"]

logger = logging.getLogger(__name__)

Cluster = Mapping[str, Sequence[str]]

#: seconds between two looks for a preempted ps's notice
_NOTICE_POLL = 0.1


class PreemptionHook(tf.compat.v1.train.SessionRunHook):
    """Requests the session's stop after the step during which the preemption signal came.

    Args:
        cluster: on the chief of a cluster with ps tasks, that (TF2) cluster:
            a preempted ps's notice, which lands in the chief's process, stops
            training too (a ps holds variables, so the job cannot go on without
            it). None on other tasks.
    """

    def __init__(self, cluster: Cluster | None = None) -> None:
        install(watcher().options if watcher().installed else None, role="train")
        self._step: Any = None
        self._stopping = False
        self._notices: dict[str, str] = {}
        if cluster:
            from strategies._server_preemption import notice_paths
            from strategies._signals import clear_signals, ensure_private_dir

            self._notices = notice_paths(cluster, jobs=("ps",))
            ensure_private_dir()
            clear_signals(list(self._notices.values()))  # notices of an earlier job on the same addresses are stale
        self._next_look = 0.0

    def begin(self) -> None:
        self._step = tf.compat.v1.train.get_global_step()

    def _ps_notices(self) -> dict[str, float | None]:
        """The preempted ps whose notices arrived, each with the seconds since its signal (None: not known)."""
        if not self._notices or time.monotonic() < self._next_look:
            return {}
        from strategies._server_preemption import take_notices

        self._next_look = time.monotonic() + _NOTICE_POLL
        return take_notices(self._notices)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self._stopping:
            return
        w = watcher()
        servers = {} if w.requested else self._ps_notices()
        if w.requested or servers:
            self._stopping = True
            w.stopped_for = list(servers)
            step = run_context.session.run(self._step) if self._step is not None else None
            cause = (f"the step in flight when {w.signal_name()} came ({w.seconds_since():.1f} s ago)"
                     if w.requested else ", ".join(
                         f"{task} was preempted" + ("" if age is None else f" (signalled {age:.1f} s ago)")
                         for task, age in servers.items()))
            logger.warning("%s: stopping at global step %s, %s", w.task, step, cause)
            run_context.request_stop()


def raise_if_preempted(model_dir: str | None, task: str, cluster: Cluster | None = None) -> None:
    """After the session closed (the chief's checkpoint written): if preempted, the chief's goodbye, then 143.

    Args:
        cluster: on the chief of a cluster with ps tasks, that (TF2) cluster:
            every ps is told to exit with 143 (a preempted one serves until
            then). None elsewhere: a worker only leaves.

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
    if cluster and cluster.get("ps"):
        from strategies._shutdown import between_graph_ending, end_job

        end_job(between_graph_ending(cluster), EXIT_PREEMPTED)
    w.done.set()
    raise TrainingPreempted(step)
