"""Preemption: a SIGTERM to any task checkpoints at the next step, and the job resumes exactly there.

Machines are taken away with a warning: Kubernetes sends SIGTERM and, after
``terminationGracePeriodSeconds`` (30 s by default), SIGKILL; Slurm signals a
job before its time limit; spot VMs get a short notice. This module turns that
warning into a checkpoint instead of lost work. What each task does on the
signal depends on its role (docs/preemption.md):

* a task that runs the training loop (the parameter-server chief, every
  MultiWorkerMirrored worker, a one-process run) only notes the signal; the
  loop (``toolkit.training.preemption_loop``) sees it after the steps in
  flight, the job agrees on that step, writes a complete checkpoint at it, and
  every task leaves with ``EXIT_PREEMPTED``;
* a parameter-server ps or worker (a server) tells the chief through the
  cluster and keeps serving until the chief, having checkpointed, says goodbye
  with ``EXIT_PREEMPTED`` (``strategies._server_preemption``, whose handler
  ``strategies.serve`` arms). A ps stops the job (it holds variables); a
  worker does not: the chief checkpoints and goes on with the other workers;
* the evaluator only reads, so it exits at once.

Whatever happens, a task exits ``EXIT_PREEMPTED`` within ``preemption_grace``
seconds of the signal (a watchdog ends it), before the SIGKILL that follows. A
checkpoint cut short by that is never the newest one: ``tf.train.CheckpointManager``
writes the ``checkpoint`` index last, so the job falls back to the one before.
The signal and the grace are ``strategies.ServeOptions`` fields
(``TFDIST_PREEMPTION_SIGNAL``, ``TFDIST_PREEMPTION_GRACE``), the same in every task.

The launcher SIGTERMs its own tasks too (to restart a cluster, or at a job's
end); it writes its stop marker into the task's directory first, and a task
that finds it exits at once, as it always did.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from strategies import ServeOptions
from strategies._server_preemption import exit_now, stopped_by_launcher
from toolkit.launcher._result import EXIT_PREEMPTED

__all__ = ["EXIT_PREEMPTED", "TrainingPreempted", "install", "watcher"]

logger = logging.getLogger(__name__)

#: the longest checkpoint write seen, under the model directory (checked against the grace at start-up)
_TIMING = Path("preemption", "save-seconds.json")


class TrainingPreempted(SystemExit):
    """Raised out of training when the task was preempted; uncaught, the process exits with ``EXIT_PREEMPTED``.

    A ``SystemExit``, so a script's ``except Exception`` does not swallow it.

    Attributes:
        step: the global step of the checkpoint written (None: nothing was written, e.g. the evaluator).
    """

    def __init__(self, step: int | None = None) -> None:
        super().__init__(EXIT_PREEMPTED)
        self.step = step


class Watcher:
    """The process's preemption state: whether, when and by which signal it was preempted.

    One per process (signals are), reached through ``watcher()``.
    """

    def __init__(self) -> None:
        self.options = ServeOptions()
        self.requested_at: float | None = None  # time.monotonic() of the signal
        self.requested_wall: float | None = None
        self.signum: int | None = None
        self.role = "train"  # "train", "server" or "evaluator"
        self.task = "local"
        self.installed = False
        self.done = threading.Event()  # set once the task's checkpoint (or its exit) is settled
        self.stopped_for: list[str] = []  # the preempted servers whose notices stopped this task's training

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def seconds_since(self) -> float:
        return 0.0 if self.requested_at is None else time.monotonic() - self.requested_at

    def remaining(self) -> float:
        """Seconds left of the grace period (the full period before any signal)."""
        return self.options.preemption_grace - self.seconds_since()

    def signal_name(self) -> str:
        return signal.Signals(self.signum or self.options.preemption_signal).name

    def reset(self) -> None:
        """Forgets a signal (tests; a process that trains twice)."""
        self.requested_at = self.requested_wall = self.signum = None
        self.stopped_for = []
        self.done.clear()

    # ---- the handler --------------------------------------------------------------
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if stopped_by_launcher():  # not a preemption: leave as before the handler existed
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.requested:
            logger.warning("%s again (%.1f s after the first): already preempting; the checkpoint is under way",
                           signal.Signals(signum).name, self.seconds_since())
            return
        self.requested_at, self.requested_wall, self.signum = time.monotonic(), time.time(), signum
        logger.warning("%s: %s was preempted; %s, then exits with %d within the grace period of %g s",
                       signal.Signals(signum).name, self.task, _PLAN[self.role], EXIT_PREEMPTED,
                       self.options.preemption_grace)
        threading.Thread(target=self._watchdog, name="tfdist-preemption-watchdog", daemon=True).start()
        if self.role == "evaluator":
            raise TrainingPreempted()

    def _watchdog(self) -> None:
        if self.done.wait(self.options.preemption_grace):
            return
        logger.error("%s: the grace period of %g s ran out before the checkpoint was written; exiting with %d. "
                     "The job resumes from its newest complete checkpoint (a cut-off write is never used). "
                     "Give a longer grace (TFDIST_PREEMPTION_GRACE, and the engine's kill deadline) if this repeats.",
                     self.task, self.options.preemption_grace, EXIT_PREEMPTED)
        exit_now(EXIT_PREEMPTED)


_PLAN = {
    "train": "the job checkpoints after the steps in flight",
    "evaluator": "the evaluator stops reading (it writes no checkpoint)",
}

_WATCHER = Watcher()


def watcher() -> Watcher:
    """This process's ``Watcher``."""
    return _WATCHER


def install(options: ServeOptions | None = None, *, role: str = "train", task: str | None = None) -> Watcher:
    """Installs the preemption handler for this process (from the main thread; elsewhere it only logs).

    Args:
        options: the signal and the grace; None reads ``ServeOptions.from_env()``.
        role: ``"train"`` (runs the loop), ``"server"`` (a parameter-server ps
            or worker) or ``"evaluator"``. A server's handler is the one
            ``strategies.serve`` arms as it starts serving (it tells the chief
            through the cluster), so none is installed here for a server.
        task: this task's name for the log, e.g. ``worker-1``.
    """
    w = _WATCHER
    w.options = options if options is not None else ServeOptions.from_env()
    w.role = role
    w.task = task or os.environ.get("TFDIST_TASK_NAME") or w.task
    if role == "server":
        return w
    if threading.current_thread() is not threading.main_thread():
        logger.debug("not the main thread: %s keeps its signal handlers", w.task)
        return w
    signal.signal(w.options.preemption_signal, w._handle)
    w.installed = True
    return w


# ---- the grace against the checkpoint's time ---------------------------------------------------
def record_save_seconds(model_dir: str, seconds: float, grace: float) -> None:
    """Keeps the longest checkpoint write seen (for the next start-up's check); warns when it exceeds the grace."""
    path = Path(model_dir) / _TIMING
    longest = max(seconds, _read_seconds(path))
    if seconds > grace:
        logger.warning("a checkpoint took %.1f s to write, longer than the preemption grace period (%g s): a "
                       "preempted job would be killed before its checkpoint lands and redo the steps since the "
                       "previous one. Raise TFDIST_PREEMPTION_GRACE and the engine's kill deadline "
                       "(terminationGracePeriodSeconds on Kubernetes).", seconds, grace)
    if longest == seconds:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_suffix(".tmp")
            temp.write_text(json.dumps({"seconds": seconds}))
            os.replace(temp, path)
        except OSError as exc:
            logger.debug("could not record the checkpoint time: %s", exc)


def _read_seconds(path: Path) -> float:
    try:
        return float(json.loads(path.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def check_grace(model_dir: str, grace: float) -> None:
    """At start-up: says so when a checkpoint of this job has already taken longer than the grace period."""
    seconds = _read_seconds(Path(model_dir) / _TIMING)
    if seconds > grace:
        logger.warning("the grace period for a preemption is %g s, but a checkpoint of this job took %.1f s: "
                       "a preemption would not finish its checkpoint. Raise TFDIST_PREEMPTION_GRACE (and the "
                       "engine's kill deadline).", grace, seconds)
