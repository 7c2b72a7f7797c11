"""``python -m toolkit.jobs.engines.local.supervisor JOB --home HOME``: runs one local job to its end.

Started detached by ``LocalBackend.submit`` (own session, output in
``<job dir>/supervisor.log``). It moves the job PREPARING -> RUNNING, runs every
task through the launcher with TF_CONFIG per task, records each task's pid,
restarts and exit code, and ends the job SUCCEEDED, FAILED or CANCELLED.
A heartbeat thread updates the record every ``HEARTBEAT_INTERVAL`` seconds so
readers can tell a live supervisor from a dead one.

SIGTERM (sent to its process group by ``cancel``) stops the launcher, which
stops every task, and the job ends CANCELLED. It runs with umask 077, so every
log and file the job writes is private to its user unless the trainer says
otherwise. If the supervisor itself dies, the next ``describe`` ends the job
FAILED and the store closes every task row still open (STOPPED, with why).

A tuning job (its record has ``details["tuning"]``) runs its study instead
(``toolkit.jobs.tuning``): trial jobs in threads of this process. There SIGTERM
only sets ``cancelled``; the study loop then stops every running trial.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sqlite3
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

from toolkit._owned import owned_dir
from toolkit.jobs.engines.local._procs import start_ticks
from toolkit.jobs.engines.local._run_parts import RunResult
from toolkit.jobs.engines.local.backend import HEARTBEAT_INTERVAL, LocalBackend
from toolkit.jobs.errors import BackendError, JobStateError
from toolkit.jobs.storage import _end_record
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.storage.store import JobStore

_log = logging.getLogger("toolkit.jobs.supervisor")
MAX_RESTARTS = 3  # per task, like the kubernetes backend's backoffLimit
QUEUE_POLL = 1.0  # seconds between a queued job's looks for room
END_RETRY, END_RETRY_INTERVAL = 600.0, 2.0  # seconds an end the store refused is retried, and between tries


class _Heartbeat(threading.Thread):
    def __init__(self, store: JobStore, name: str) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.store, self.job, self.stopped = store, name, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_INTERVAL):
            try:
                self.store.heartbeat(self.job)
            except (sqlite3.Error, BackendError):  # a missed beat must not end the job; log it and beat again
                _log.exception("heartbeat failed; retrying in %.0f s", HEARTBEAT_INTERVAL)


class Supervisor:
    """Drives one job through its states around a launcher run."""

    def __init__(self, store: JobStore, name: str) -> None:
        self.store, self.name = store, name
        self.cancelled = threading.Event()
        self.job_dir = store.job_dir(name)
        self._raise_on_signal = True  # a study stops its trials itself; a plain job unwinds the launcher
        self.result: RunResult | None = None

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        _log.info("signal %d: cancelling job %s", signum, self.name)
        self.cancelled.set()
        if self._raise_on_signal:
            raise _Cancelled()

    def run(self) -> int:
        self.store.set_supervisor(self.name, pid=os.getpid(), start_ticks=start_ticks(os.getpid()),
                                  host=socket.gethostname())
        signal.signal(signal.SIGTERM, self._on_sigterm)
        heartbeat = _Heartbeat(self.store, self.name)
        heartbeat.start()
        try:  # room for the job's end, should the store's disk fill before then (_end_record)
            _end_record.reserve(self.job_dir)
        except OSError as exc:
            _log.warning("could not reserve %s for the job's end: %s", _end_record.END_FILE, exc)
        try:
            return self._run()
        except _Cancelled:
            if self.result is not None and self.result.clean:  # SIGTERM came once every task had exited 0
                return self._end_succeeded("every task finished")
            return self._end_cancelled()
        except Exception as exc:
            self._end(JobState.FAILED, error=f"the supervisor failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            heartbeat.stopped.set()

    def _run(self) -> int:
        record = self.store.get(self.name)
        if "tuning" in record.details:
            return self._run_study()
        plan = LocalBackend.plan_of(record)
        if not self._wait_for_room(record, "starting tasks"):
            return self._end_cancelled()
        owned_dir(self.job_dir / "logs", what="the job's logs directory", parents=False)
        if not self.store.advance(self.name, JobState.RUNNING,
                                  message=f"{len(plan.task_names)} tasks: {', '.join(plan.task_names)}"):
            return self._end_cancelled()
        from toolkit.jobs.engines.local._run import run_tasks
        self.result = result = run_tasks(plan, self.job_dir, store=self.store, job=self.name,
                                         max_restarts=MAX_RESTARTS)
        try:
            return self._finish(result)
        except BackendError as exc:  # even reading the store failed (a full disk): the end is kept beside the logs
            state, fields = self._verdict(result)
            return self._end_unrecorded(state, exc, lambda: self._finish(result), **fields)

    def _finish(self, result: RunResult) -> int:
        if result.clean:  # every task exited 0 by itself: a cancel that raced the end does not rewrite it
            return self._end_succeeded("every task finished")
        if self.cancelled.is_set() or self.store.get(self.name).state is JobState.CANCELLING:
            return self._end_cancelled()
        state, fields = self._verdict(result, cancelled=False)
        return self._end(state, **fields)

    def _verdict(self, result: RunResult, *, cancelled: bool | None = None) -> tuple[JobState, dict[str, Any]]:
        """How the job ended, from its tasks alone (``cancelled``: as this process saw it, when None)."""
        if result.clean:
            return JobState.SUCCEEDED, {"exit_code": 0, "message": "every task finished"}
        if self.cancelled.is_set() if cancelled is None else cancelled:
            return JobState.CANCELLED, {"message": "every task stopped"}
        if result.exit_code == 0:
            return JobState.SUCCEEDED, {"exit_code": 0, "message": result.message or "the chief finished"}
        return JobState.FAILED, {"exit_code": result.exit_code, "error": result.error}

    def _run_study(self) -> int:
        self._raise_on_signal = False
        if not self._wait_for_room(self.store.get(self.name), "opening the study"):
            return self._end_cancelled()
        from toolkit.jobs.tuning._study import StudyRunner
        runner = StudyRunner(self.store, self.name, cancelled=self.cancelled)
        if not self.store.advance(self.name, JobState.RUNNING,
                                  message=f"up to {runner.hp.max_parallel_trials} trials at a time"):
            return self._end_cancelled()
        outcome = runner.run()
        if outcome.state is JobState.CANCELLED or self.store.get(self.name).state is JobState.CANCELLING:
            return self._end_cancelled()
        return self._end(outcome.state, message=outcome.message, error=outcome.error)

    def _wait_for_room(self, record: Any, message: str) -> bool:
        """Moves the job to PREPARING once fewer than its ``maxRunning`` jobs run (it stays QUEUED until then,
        and jobs whose supervisors died are reaped meanwhile); False if it was cancelled first."""
        limit = record.details.get("maxRunning")
        if not limit or record.parent_job is not None:
            return self.store.advance(self.name, JobState.PREPARING, message=message)
        logged = False
        while not self.cancelled.is_set():
            started = self.store.start_if_room(self.name, limit=int(limit), message=message)
            if started is not False:  # True: its turn; None: a cancel came first
                return bool(started)
            if not logged:
                _log.info("job %s is queued: %d local jobs run already, the most at once", self.name, limit)
                logged = True
            LocalBackend(self.store).list()  # a job whose supervisor died is ended, and its room freed
            time.sleep(QUEUE_POLL)
        return False

    def _end_succeeded(self, message: str) -> int:
        self._raise_on_signal = False  # finished: a late SIGTERM must not unwind the bookkeeping
        late = self.cancelled.is_set() or self.store.get(self.name).state is JobState.CANCELLING
        note = " (a cancel arrived after they had)" if late else ""
        return self._end(JobState.SUCCEEDED, exit_code=0, message=message + note)

    def _end_cancelled(self) -> int:
        try:
            return self._record_cancelled()
        except BackendError as exc:
            return self._end_unrecorded(JobState.CANCELLED, exc, self._record_cancelled, message="every task stopped")

    def _record_cancelled(self) -> int:
        state = self.store.get(self.name).state
        if state is not JobState.CANCELLING and not state.is_final:
            self.store.transition(self.name, JobState.CANCELLING, message="the supervisor was signalled")
        return self._record_end(JobState.CANCELLED, message="every task stopped")

    def _end(self, state: JobState, **fields: Any) -> int:
        try:
            return self._record_end(state, **fields)
        except BackendError as exc:  # the store cannot be written (a full disk): the end is kept beside the logs
            return self._end_unrecorded(state, exc, lambda: self._record_end(state, **fields), **fields)

    def _end_unrecorded(self, state: JobState, exc: BackendError, retry: Any, **fields: Any) -> int:
        """Keeps the end in ``end.json`` (readers show it), then retries the store for ``END_RETRY`` s."""
        self._raise_on_signal = False  # the job has ended: a late SIGTERM must not turn it into a cancel
        _end_record.write_end(self.job_dir, state, why=str(exc), message=fields.get("message"),
                              error=fields.get("error"), exit_code=fields.get("exit_code"))
        _log.error("job %s ended %s, but the store cannot record it (%s); the end is kept in %s, and the store "
                   "is tried again every %g s for %g s", self.name, state, exc, self.job_dir / _end_record.END_FILE,
                   END_RETRY_INTERVAL, END_RETRY)
        deadline = time.monotonic() + END_RETRY
        while time.monotonic() < deadline:
            time.sleep(END_RETRY_INTERVAL)
            try:
                code: int = retry()
            except BackendError:
                continue
            _end_record.blank(self.job_dir)
            return code
        _log.error("job %s: the store still cannot be written; readers show the end kept in %s", self.name,
                   self.job_dir / _end_record.END_FILE)
        return 0 if state is JobState.SUCCEEDED else 1

    def _record_end(self, state: JobState, **fields: Any) -> int:
        try:
            self.store.transition(self.name, state, **fields)
        except JobStateError:
            current = self.store.get(self.name).state
            if current is not JobState.CANCELLING:
                raise
            state = JobState.CANCELLED  # a cancel arrived as the tasks ended: honour it
            self.store.transition(self.name, state, message="every task stopped")
        _log.info("job %s ended %s", self.name, state)
        return 0 if state is JobState.SUCCEEDED else 1


class _Cancelled(BaseException):
    """Raised in the main thread by SIGTERM, so the launcher's cleanup stops every task."""


def _private_output() -> None:
    """``supervisor.log`` (this process's stdout, opened by whoever started it) becomes 0600 too."""
    try:
        fd = sys.stdout.fileno()
        info = os.fstat(fd)
    except (AttributeError, ValueError, OSError):  # no stdout, or not a real file: nothing to protect
        return
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
        os.fchmod(fd, 0o600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.jobs.engines.local.supervisor",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("job")
    parser.add_argument("--home", type=Path, required=True)
    args = parser.parse_args(argv)
    os.umask(0o077)  # the job's logs and outputs are its user's alone (docs/security.md)
    _private_output()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return Supervisor(JobStore(args.home), args.job).run()


if __name__ == "__main__":
    sys.exit(main())
