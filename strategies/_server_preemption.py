"""A serving task's preemption: on the signal it tells its chief, serves on until the chief answers, exits 143.

Every task that only serves (a parameter-server ps or worker of ``toolkit.fit``,
of Keras' ``model.fit`` under ``toolkit.enable_distributed_keras()`` or of a
script's ``run_role()``, the Estimator's ps, a TF1 script's ps) reacts the same
way. On the preemption signal (``ServeOptions.preemption_signal``, default
SIGTERM) it writes ``preempted-<job>-<index>`` into the chief's process through
the cluster (the serve/goodbye protocol's own channel,
``strategies._shutdown.send``) and keeps serving. The chief stops or goes on
(``toolkit.training.preemption_loop``, the Estimator's ``PreemptionHook``),
checkpoints, and answers with the goodbye, exit code 143, which
``strategies._roles.serve_until_goodbye`` carries out like any goodbye.
Whatever happens the task exits 143 within ``ServeOptions.preemption_grace``
seconds (default 25) of the signal. A SIGTERM the launcher sends to stop a task
(its ``stop-requested`` marker) ends it as before.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import NoReturn

from strategies._serve_options import ServeOptions

__all__ = ["EXIT_MARGIN", "EXIT_PREEMPTED", "arm", "exit_now", "notice_kind", "notice_paths", "stopped_by_launcher",
           "take_notices"]

logger = logging.getLogger(__name__)

EXIT_PREEMPTED = 128 + signal.SIGTERM
# the launcher's names (toolkit.launcher), which this layer cannot import: its task directory and stop marker
_ENV_TASK_DIR, _STOP_MARKER = "TFDIST_TASK_DIR", "stop-requested"
#: a preempted server leaves this much of its grace for its own exit
EXIT_MARGIN = 1.0


def notice_kind(job: str, index: int) -> str:
    """The signal a preempted server ``job:index`` leaves in its chief's process."""
    return f"preempted-{job}-{index}"


def notice_paths(cluster: Mapping[str, Sequence[str]], jobs: Sequence[str] = ("ps", "worker")) -> dict[str, str]:
    """Where each server of ``jobs`` leaves its notice in the chief's process, by task name (``ps-0``)."""
    from strategies._shutdown import chief_of
    from strategies._signals import signal_path

    chief = chief_of(cluster)
    return {f"{job}-{index}": signal_path(cluster, *chief, notice_kind(job, index))
            for job in jobs for index in range(len(cluster.get(job, ())))}


def take_notices(paths: Mapping[str, str]) -> dict[str, float | None]:
    """The notices that arrived at ``paths`` (by task name, as ``notice_paths`` gives), each taken once.

    Each maps to the seconds since its server was signalled, read from the wall time the notice carries
    (None when it carries none that reads).
    """
    from strategies._signals import take_signal

    taken = {task: take_signal(path) for task, path in paths.items()}
    return {task: _age(text) for task, text in taken.items() if text is not None}


def _age(text: str) -> float | None:
    try:
        return max(time.time() - float(text), 0.0)
    except ValueError:
        return None


def stopped_by_launcher() -> bool:
    """Whether the launcher marked this task stopped: its SIGTERM then ends the task and is no preemption."""
    task_dir = os.environ.get(_ENV_TASK_DIR) or ""
    return bool(task_dir) and os.path.exists(os.path.join(task_dir, _STOP_MARKER))


def exit_now(code: int) -> NoReturn:
    """A watchdog's exit: at once, whatever the other threads do, with the log and the streams flushed."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class _Preempted:
    def __init__(self, cluster: Mapping[str, Sequence[str]], job: str, index: int, grace: float) -> None:
        self.cluster, self.job, self.index, self.grace = cluster, job, index, grace
        self.at: float | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if stopped_by_launcher():  # the launcher's stop ends the task as the default handler would
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        name = f"{self.job}-{self.index}"
        if self.at is not None:
            logger.warning("%s again (%.1f s after the first): already preempting", signal.Signals(signum).name,
                           time.monotonic() - self.at)
            return
        self.at = time.monotonic()
        logger.warning("%s: %s was preempted; it tells the chief and serves until the chief has checkpointed, "
                       "then exits with %d within the grace period of %g s", signal.Signals(signum).name, name,
                       EXIT_PREEMPTED, self.grace)
        threading.Thread(target=self._tell_chief, name="tfdist-preempted-notice", daemon=True).start()
        threading.Thread(target=self._watchdog, name="tfdist-preemption-watchdog", daemon=True).start()

    def _tell_chief(self) -> None:
        from strategies._shutdown import chief_of, send

        chief = chief_of(self.cluster)
        if not send(self.cluster, [chief], notice_kind(self.job, self.index), f"{time.time():.3f}",
                    timeout=max(self.grace - 2 * EXIT_MARGIN, 1.0)):
            logger.warning("%s-%d: the chief at %s did not take the notice; serving on until the grace ends",
                           self.job, self.index, self.cluster[chief[0]][chief[1]])

    def _watchdog(self) -> None:
        time.sleep(max(self.grace - EXIT_MARGIN, 0.0))
        logger.error("%s-%d: no goodbye from the chief within %g s of the signal; exiting with %d (the job resumes "
                     "from its newest complete checkpoint)", self.job, self.index, self.grace, EXIT_PREEMPTED)
        exit_now(EXIT_PREEMPTED)


def arm(cluster: Mapping[str, Sequence[str]], job: str, index: int, options: ServeOptions | None = None) -> bool:
    """Installs the server's preemption handler (main thread, default handler only); True if installed.

    Args:
        options: the signal and the grace (None: ``ServeOptions.from_env()``).
    """
    options = ServeOptions.from_env() if options is None else options
    signum = options.preemption_signal
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signum) is not signal.SIG_DFL:
        return False
    signal.signal(signum, _Preempted(cluster, job, index, options.preemption_grace).handle)
    return True
