"""The training loop's side of preemption: agree on a step, checkpoint there, leave with ``EXIT_PREEMPTED``.

``run_loop`` asks ``LoopPreemption.check`` after every chunk of steps (and
once before the first). Who decides depends on the runner:

* one controller (the parameter-server chief, a one-process run): its own
  signal, or a ps's notice, stops the job at the step the variable holds after
  the steps in flight; a worker's notice only makes it checkpoint there and go
  on (the coordinator moves that worker's work to the others). A preempted
  server's notice reaches the chief through the cluster
  (``strategies._server_preemption``): the server keeps serving until the
  chief, after its checkpoint, says goodbye with ``EXIT_PREEMPTED``, to that
  worker alone, or to every server when a ps stops the job;
* every worker runs the loop (MultiWorkerMirrored): each execution carries
  every worker's flag ("was I signalled?") in the all-reduce of its stats
  (``Runner.flagged``), so all workers learn of a signal from the same
  execution, stop at the same step, save together (a save may involve
  collectives), and leave. The vote costs no collective and no host wait of
  its own; a signal stops the job after at most two executions. Only the check
  before the first step, which no execution precedes, asks the others once.

The checkpoint goes through the loop's own ``CheckpointHook``\\ s, so it is the
same checkpoint a restart restores; Keras callbacks are not told the training
ended (``BackupAndRestore`` must keep its backup), and the parameter-server
chief tells its servers to exit with ``EXIT_PREEMPTED`` too.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from toolkit.training.hooks import CheckpointHook
from toolkit.training.loop import Hook
from toolkit.training.preemption import EXIT_PREEMPTED, TrainingPreempted, check_grace, install, watcher
from toolkit.training.runners import Runner

__all__ = ["LoopPreemption"]

logger = logging.getLogger(__name__)


class LoopPreemption:
    """Checks for a preemption between chunks and carries it out."""

    def __init__(self, runner: Runner, hooks: Sequence[Hook]) -> None:
        self.runner = runner
        self.watch = watcher()
        # Installed here too: a loop called without fit (Keras model.fit) has no handler yet, and
        # MultiWorkerMirroredStrategy's coordination service replaces the one fit installed with its own.
        install(self.watch.options if self.watch.installed else None, role="train")
        self.checkpoints = [h for h in hooks if isinstance(h, CheckpointHook)]
        self.model_dir = next((h.directory for h in self.checkpoints if not h.temporary), None)
        runner.flag = lambda: self.watch.requested  # multi-worker runners pass it into each execution
        self.last_step: int | None = None  # the step of the previous check
        self.signal_step: int | None = None  # the last step known before this task saw its signal
        self.cluster = _cluster_of(runner)
        if self.cluster is not None:  # notices of an earlier run on the same addresses are stale
            from strategies._server_preemption import notice_paths
            from strategies._signals import clear_signals

            clear_signals(list(notice_paths(self.cluster).values()))
        if self.model_dir is not None:
            check_grace(self.model_dir, self.watch.options.preemption_grace)

    def check(self, step: int) -> None:
        """Called with the global step after each chunk; raises ``TrainingPreempted`` when the job must stop."""
        before, self.last_step = self.last_step, step
        if self.watch.requested and self.signal_step is None:
            self.signal_step = step if before is None else before
        notices: dict[str, float | None] = {}
        if self.runner.single_controller:
            stop = self.watch.requested
            notices = self._notices()
            stop = stop or any(task.startswith("ps-") for task in notices)
            if not stop and notices:
                seconds = self._save(step)
                logger.warning("%s preempted (%s): %s; training goes on without it until it is restarted",
                               ", ".join(notices), _notice_age(notices, before), _saved(step, seconds))
                self._release(list(notices))
                return
        else:
            stop = self.runner.agree(self.watch.requested) if before is None else self.runner.flagged()
        if stop:
            self._stop(step, notices, before)

    def _notices(self) -> dict[str, float | None]:
        """The preempted servers whose notices arrived since the last check (``ps-0``), each taken once.

        Each maps to how many seconds ago its server was signalled (None when the notice carries no time).
        """
        if self.cluster is None:
            return {}
        from strategies._server_preemption import notice_paths, take_notices

        return take_notices(notice_paths(self.cluster))

    def _release(self, workers: Sequence[str]) -> None:
        """After the checkpoint: the preempted workers may leave (a goodbye with ``EXIT_PREEMPTED``)."""
        if self.cluster is None:
            return
        from strategies._shutdown import say_goodbye

        tasks = [("worker", int(name.rsplit("-", 1)[1])) for name in workers if name.startswith("worker-")]
        if tasks:
            say_goodbye(self.cluster, tasks, EXIT_PREEMPTED)

    def _save(self, step: int) -> float | None:
        """Seconds the checkpoint at ``step`` took; None when it was written (or restored from) already."""
        start = time.monotonic()
        wrote = [hook.save_now(step) for hook in self.checkpoints]
        return time.monotonic() - start if any(wrote) else None

    def _stop(self, step: int, notices: dict[str, float | None], before: int | None) -> None:
        seconds = self._save(step)
        for hook in self.checkpoints:
            hook.discard_scratch()
        if self.watch.requested:
            who = f"{self.watch.signal_name()} {self.watch.seconds_since():.1f} s ago"
            since = "" if self.signal_step is None else f", after step {self.signal_step}"
        elif notices:  # a ps's notice (a parameter-server chief)
            who, since = _notice_age(notices, before), ""
        else:  # another worker's vote (MultiWorkerMirrored)
            who, since = "another task's preemption", ""
        where = _saved(step, seconds) if self.checkpoints else \
            f"no checkpoint configured: the job resumes from its last one (step {step} not saved)"
        logger.warning("preempted (%s%s): %s; exiting with %d", who, since, where, EXIT_PREEMPTED)
        self.watch.done.set()
        if self.cluster is not None:  # a parameter-server chief: its servers exit with EXIT_PREEMPTED too
            from strategies import shutdown_cluster

            shutdown_cluster(self.runner.strategy, EXIT_PREEMPTED)
        raise TrainingPreempted(step if self.checkpoints else None)


def _cluster_of(runner: Runner) -> dict[str, list[str]] | None:
    """The parameter-server cluster a coordinator runs (its servers' notices land in this process), else None."""
    if getattr(runner, "coordinator", None) is None:
        return None
    from strategies._compat import pss_cluster

    return pss_cluster(runner.strategy)


def _saved(step: int, seconds: float | None) -> str:
    if seconds is None:
        return f"step {step} is checkpointed already (or the job started there)"
    return f"checkpoint at step {step} written in {seconds:.2f} s"


def _notice_age(notices: dict[str, float | None], before: int | None) -> str:
    """``worker-0's notice, signalled 0.4 s ago, taken after step 30``: for the log, and the tests that read it."""
    ages = [f"{task}'s notice, signalled {age:.1f} s ago" if age is not None else f"{task}'s notice"
            for task, age in notices.items()]
    return ", ".join(ages) + ("" if before is None else f", taken after step {before}")
