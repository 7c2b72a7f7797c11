"""The launcher's run of one job: start its tasks, poll them to an outcome, wind down, report.

``Job`` (``_supervisor``) holds the tasks and carries out the policy's decisions;
this loop drives it and turns SIGINT/SIGTERM to the launcher into a request to
stop the job.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator

from toolkit.launcher._policy import Outcome
from toolkit.launcher._result import LaunchResult, Reason
from toolkit.launcher.local._supervisor import Job

__all__ = ["catch_signals", "supervise"]

logger = logging.getLogger(__name__)
_POLL = 0.2


@contextlib.contextmanager
def catch_signals(job: Job) -> Iterator[None]:
    """Turns SIGINT/SIGTERM into a request to stop the job (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handler(signum: int, frame: object) -> None:
        if job.signal is None and signum == signal.SIGTERM:
            job.preempted = True
        job.signal = signum

    for sig in previous:
        signal.signal(sig, _handler)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def supervise(job: Job) -> LaunchResult:
    """Runs the job to its end; every process is gone when this returns."""
    started = time.monotonic()
    deadline = None if job.spec.timeout is None else started + job.spec.timeout
    outcome: Outcome | None = None
    with catch_signals(job):
        try:
            job.start_all()
            while outcome is None:
                time.sleep(_POLL)
                outcome = job.check(deadline)
            if job.preempted and outcome.reason is Reason.INTERRUPTED:
                job.pass_on_preemption()
            chief_done = job.chief.exit_code is not None and outcome.reason in (Reason.SUCCEEDED, Reason.FAILED)
            job.wind_down(job.spec.grace_period if chief_done else 0.0)
            outcome = job.judge_success(outcome)
        finally:
            if outcome is None:  # an exception escaped: never leave processes behind
                job.wind_down(0.0)
            job.close()
            job.remove_signal_dir()
    log = logger.info if outcome.exit_code == 0 else logger.error
    log("job %s: %s", outcome.reason, outcome.message)
    return LaunchResult(exit_code=outcome.exit_code, reason=outcome.reason, message=outcome.message,
                        tasks=job.results(), duration=time.monotonic() - started, job_dir=job.job_dir,
                        cluster_restarts=job.cluster_restarts, preemptions=job.preemptions, failures=job.failures)
