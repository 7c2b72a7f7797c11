"""Jobs supervised from this machine, whatever engine runs their tasks: the shared base of the
local, Ray and Slurm backends.

``submit`` records the job (QUEUED) and starts ``python -m toolkit.jobs.engines.local.supervisor
<job>`` in its own session, with its output in ``supervisor.log``, then returns.
The supervisor runs the tasks through the launcher and keeps the record
current. Anyone can look at the job later: ``describe`` notices a supervisor
that died (its pid is gone and its heartbeat stale), stops the tasks it left
behind and marks the job FAILED, so no job stays RUNNING forever.

Where the tasks run is the plan's ``engine`` (``engine()`` of the backend; None
runs them here as processes); the supervisor hands the plan to the task runner
registered under that engine's name (``toolkit.jobs.engines.local._run.RUNNERS``). A tuning
job's trials run on the same engine, one job (one sbatch, one set of
actors) per trial.
"""
from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolkit._owned import UnsafePathError, open_append, owned_dir
from toolkit.jobs.engines.local._local_plan import LocalPlan, plan_local
from toolkit.jobs.engines.local._procs import ENV_JOB_NONCE, is_alive, signal_group, start_ticks, stop_groups
from toolkit.jobs.engines.local._run import task_name
from toolkit.jobs.errors import BackendError, JobSpecError, JobStateError, Problem
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage._end_record import merged, note, read_end
from toolkit.jobs.storage.logs import follow as follow_logs
from toolkit.jobs.storage.records import JobRecord
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.storage.store import JobStore

__all__ = ["HEARTBEAT_INTERVAL", "SupervisedBackend"]

_log = logging.getLogger(__name__)
HEARTBEAT_INTERVAL = 2.0  # seconds between supervisor heartbeats
_STALE_BEATS = 3          # heartbeats missed before a supervisor with a dead pid counts as dead
_REMOTE_STALE = 60.0      # a supervisor on another host is dead only after this long without a beat


class SupervisedBackend:
    """A backend whose jobs a detached supervisor on this machine drives; records live in ``store``."""

    name = "supervised"

    def __init__(self, store: JobStore, *, python: str = sys.executable) -> None:
        self.store = store
        self.python = python

    def submit(self, spec: JobSpec) -> JobRecord:
        """Records the job and starts its supervisor; a spec with ``hyperparameters`` becomes a tuning job."""
        if spec.training_input.hyperparameters is not None:
            from toolkit.jobs.tuning._submit import plan_tuning
            details, warnings = plan_tuning(spec, self.store, cwd=Path.cwd(), python=self.python)
        else:
            plan, warnings = plan_local(spec, cwd=Path.cwd(), python=self.python)
            details = {"plan": plan.to_dict(), "tasks": plan.task_names}
        details = self.extend_details(spec, details)
        warnings = self.plan_warnings(warnings)
        for warning in warnings:  # kept in the record too; the CLI prints them from there
            _log.info("%s: %s", spec.job_id, warning)
        name = spec.required_job_id
        self.store.create(name, backend=self.name, spec=spec.to_dict(),
                          warnings=tuple(f"{w.field}: {w.message}" for w in spec.warnings) + tuple(warnings),
                          details=details)
        job_dir = self.store.job_dir(name)
        try:
            owned_dir(job_dir, what=f"job {name!r}'s directory", parents=False)
            self._spawn(name, job_dir)
        except (OSError, UnsafePathError) as exc:
            self.store.transition(name, JobState.FAILED, error=f"cannot start the supervisor: {exc}")
            raise BackendError(f"cannot start the supervisor for job {name!r}: {exc}") from exc
        return self.store.get(name)

    def engine(self, spec: JobSpec) -> dict[str, Any] | None:
        """Where the tasks run: None for processes here, else ``{"name": ..., "options": ...}``."""
        return None

    def plan_warnings(self, warnings: list[str]) -> list[str]:
        """The planner's warnings that hold on this engine (the planner speaks of this machine)."""
        return warnings

    def extend_details(self, spec: JobSpec, details: dict[str, Any]) -> dict[str, Any]:
        """The stored plan (a job's, or a tuning job's trials') with this backend's engine in it."""
        engine = self.engine(spec)
        if engine is None:
            return details
        return {**details, "plan": {**dict(details["plan"]), "engine": dict(engine)}}

    def _spawn(self, name: str, job_dir: Path) -> None:
        """Starts the supervisor detached: own session, no terminal, output to a file."""
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # keep tfdist importable from any cwd
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        nonce = env[ENV_JOB_NONCE] = secrets.token_hex(16)  # the supervisor's tasks inherit it
        log = open_append(job_dir / "supervisor.log")  # private, as the home; never through a symlink
        with open(log, "ab") as out:  # -P: the job dir (its cwd) is not on sys.path, so nothing planted there runs
            proc = subprocess.Popen(
                [self.python, "-P", "-m", "toolkit.jobs.engines.local.supervisor", name,
                 "--home", str(self.store.home)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=job_dir, env=env,
                start_new_session=True, close_fds=True)
        self.store.set_supervisor(name, pid=proc.pid, start_ticks=start_ticks(proc.pid), host=socket.gethostname(),
                                  nonce=nonce)

    def _supervisor_dead(self, record: JobRecord) -> bool:
        info = self.store.supervisor(record.name)
        age = time.time() - (info.heartbeat_at or record.created_at)
        if info.pid is None or info.host != socket.gethostname():
            return age > _REMOTE_STALE
        # A beat from the future: the supervisor's clock jumped forward before it died, and its last beat
        # would look fresh until the wall clock caught up. Here the pid is what counts.
        window = HEARTBEAT_INTERVAL * _STALE_BEATS
        return not is_alive(info.pid, info.start_ticks) and (age > window or age < -window)

    def describe(self, name: str) -> JobRecord:
        record = self.store.get(name)
        if record.is_final:
            return record
        if not self._supervisor_dead(record):
            return merged(record)  # an end the store could not take (a full disk) is shown from end.json
        return self._reap(record)

    def _reap(self, record: JobRecord) -> JobRecord:
        """Ends a job whose supervisor died: its tasks, and a tuning job's live trials, are stopped."""
        name = record.name
        info = self.store.supervisor(name)
        self._stop_tasks(name)
        for trial in self.store.children(name):  # the trials shared the dead supervisor
            child = self.store.get(trial)
            if not child.is_final:
                self._reap(child)
        target = JobState.CANCELLED if record.state is JobState.CANCELLING else JobState.FAILED
        end = read_end(Path(record.record_dir)) if record.record_dir else None
        if end is not None:  # it ended, but the store could not take it then: that end, not "supervisor died"
            return self._record_kept_end(record, end)
        try:
            return self.store.transition(name, target, error=f"supervisor died (pid {info.pid}); its tasks were "
                                                             "stopped. Submit the job again under a new name.")
        except JobStateError:  # it finished while we looked
            return self.store.get(name)

    def _record_kept_end(self, record: JobRecord, end: dict[str, Any]) -> JobRecord:
        """Records the end its supervisor kept in ``end.json``; on a store still full, shows it merged."""
        try:
            if end["state"] is JobState.CANCELLED and record.state is not JobState.CANCELLING:
                self.store.transition(record.name, JobState.CANCELLING, message="the supervisor was signalled")
            return self.store.transition(record.name, end["state"], message=note(end), error=end.get("error"),
                                         exit_code=end.get("exitCode"))
        except BackendError:
            return merged(record)
        except JobStateError:
            return self.store.get(record.name)

    def _stop_tasks(self, name: str) -> None:
        stop_groups([(pid, ticks) for _, pid, ticks in self.store.task_processes(name)],
                    nonce=self.store.supervisor(name).nonce, legacy=self._task_argv(name))

    def _task_argv(self, name: str) -> list[str] | None:
        """What a task's command line carries (``-m <module>``): the check for a job recorded before nonces."""
        plan = self.store.get(name).details.get("plan") or {}
        return ["-m", str(plan["module"])] if plan.get("module") else None

    def _supervisor_argv(self, name: str) -> list[str]:
        """What the supervisor's command line carries (``_spawn``): the check for a job recorded before nonces."""
        return ["-m", "toolkit.jobs.supervisor", name, "--home", str(self.store.home)]

    def list(self) -> list[JobRecord]:
        return [self.describe(name) for name in self.store.names(backend=self.name)]

    def cancel(self, name: str, *, timeout: float = 30.0) -> JobRecord:
        """Asks the supervisor to stop (SIGTERM to its group); forces it after ``timeout`` seconds."""
        record = self.describe(name)
        if record.is_final:
            raise JobStateError(f"job {name!r} already ended {record.state}; there is nothing to cancel.")
        if record.parent_job is not None:
            return self._cancel_trial(record, timeout=timeout)
        if record.state is not JobState.CANCELLING:
            try:
                self.store.transition(name, JobState.CANCELLING, message="cancel requested")
            except JobStateError:
                return self._already_over(name)
        info = self.store.supervisor(name)
        signal_group(info.pid, info.start_ticks, signal.SIGTERM, nonce=info.nonce, legacy=self._supervisor_argv(name))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.describe(name)
            if record.is_final:
                return record
            time.sleep(0.2)
        _log.warning("job %s: the supervisor did not stop within %.0f s; killing its processes", name, timeout)
        signal_group(info.pid, info.start_ticks, signal.SIGKILL, nonce=info.nonce, legacy=self._supervisor_argv(name))
        self._stop_tasks(name)
        try:
            return self.store.transition(name, JobState.CANCELLED,
                                         message=f"forced: the supervisor did not stop within {timeout:g} s")
        except JobStateError:
            return self.store.get(name)

    def _cancel_trial(self, record: JobRecord, *, timeout: float) -> JobRecord:
        """Stops one trial of a tuning job: its tasks, not the supervisor that runs the other trials."""
        name = record.name
        if record.state is not JobState.CANCELLING:
            try:
                self.store.transition(name, JobState.CANCELLING, message="cancel requested")
            except JobStateError:
                return self._already_over(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._stop_tasks(name)
            record = self.describe(name)
            if record.is_final:
                return record
            time.sleep(0.2)
        _log.warning("trial %s did not stop within %.0f s", name, timeout)
        return self.store.get(name)

    def _already_over(self, name: str) -> JobRecord:
        record = self.store.get(name)
        if record.is_final:
            raise JobStateError(f"job {name!r} already ended {record.state}; there is nothing to cancel.")
        return record

    def stream_logs(self, name: str, *, task: str | None = None, sink: Callable[[str], None],
                    follow: bool = True, poll_interval: float = 0.5) -> JobRecord:
        record = self.store.get(name)
        tasks = list(record.details.get("tasks", []))
        if task is not None and task not in tasks:
            raise JobSpecError([Problem("error", "task", f"received {task!r}; job {name!r} has tasks "
                                        f"{', '.join(tasks)}. Pick one of them.")])
        primary = self.plan_of(record).primary
        return follow_logs(lambda: self.describe(name), Path(record.job_dir or self.store.job_dir(name)) / "logs",
                           tasks=[task] if task else None, sink=sink, follow=follow, poll_interval=poll_interval,
                           rename=lambda stem: task_name(stem, primary))

    @staticmethod
    def plan_of(record: JobRecord) -> LocalPlan:
        return LocalPlan.from_dict(dict(record.details["plan"]))
