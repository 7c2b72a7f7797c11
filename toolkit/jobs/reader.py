"""One reading of jobs for everything that shows them: ``tfdist jobs describe`` and ``tfdist ui``.

Both take a job's record from its backend, as ``api.describe`` does (a dead
supervisor is noticed, a TFJob's state is asked of ``kubectl``), and derive
what they show from that record here: a task's role, node and preemptions, a
job's duration, a study's trials with their latest measurements. So the CLI
and the dashboard cannot disagree about a job.

A list of many jobs is read from the store in one transaction
(``JobStore.records``); only the jobs that are still live are asked of their
backend, and not more often than every ``refresh`` seconds, so a page that
polls costs the running jobs nothing but SQLite reads (WAL mode: readers never
block the supervisors' writes).

Example:
    >>> from toolkit.jobs.reader import split_task
    >>> split_task("worker-12")
    ('worker', 12)
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit.jobs.backends import Backend, get_backend
from toolkit.jobs.errors import BackendError, JobNotFoundError
from toolkit.jobs.model.names import validate_job_name
from toolkit.jobs.storage.records import JobRecord, iso_time
from toolkit.jobs.storage.store import JobStore

__all__ = ["JobReader", "job_doc", "job_row", "output_dir", "split_task", "study_doc", "task_rows"]


def split_task(name: str) -> tuple[str, int | None]:
    """``worker-1`` -> ``("worker", 1)``; a name with no index keeps it whole (``study``)."""
    role, _, index = name.rpartition("-")
    return (role, int(index)) if role and index.isdigit() else (name, None)


def _duration(record: JobRecord, now: float) -> float | None:
    if record.started_at is None:
        return None
    return round((record.ended_at or now) - record.started_at, 3)


def task_rows(record: JobRecord) -> list[dict[str, Any]]:
    """Each task as ``describe`` shows it: role, where it ran, state, exit code, restarts, preemptions."""
    nodes = record.details.get("nodes") or {}
    preempted = ((record.details.get("restarts") or {}).get("preemptedTasks")) or {}
    rows = []
    for task in record.tasks:
        role, index = split_task(task.name)
        where = nodes.get(task.name) or {}
        node = (where.get("node_id") or "")[:12] or None  # a Ray node's id, a Slurm node's name
        rows.append({"name": task.name, "role": role, "index": index, "state": task.state, "pid": task.pid,
                     "node": node, "address": where.get("address"), "exitCode": task.exit_code,
                     "restarts": task.restarts, "preemptions": int(preempted.get(task.name, 0)),
                     "reason": task.reason or where.get("reason"), "updateTime": iso_time(task.updated_at)})
    return rows


def output_dir(record: JobRecord) -> str | None:
    """Where the trainer writes (its ``--job-dir``): a trial's directory, a study's, or the plan's argument."""
    details = record.details
    if (details.get("trial") or {}).get("outputDir"):
        return str(details["trial"]["outputDir"])
    if (details.get("tuning") or {}).get("jobDir"):
        return str(details["tuning"]["jobDir"])
    args = list((details.get("plan") or {}).get("args") or [])
    if "--job-dir" in args and args.index("--job-dir") + 1 < len(args):
        return str(args[args.index("--job-dir") + 1])
    job_dir = (record.spec.get("trainingInput") or {}).get("jobDir")
    return str(job_dir) if job_dir else None


def job_row(record: JobRecord, *, now: float | None = None) -> dict[str, Any]:
    """One line of a job list: name, state, backend, times, its tasks' (a study's: trials') states counted."""
    counts: dict[str, int] = {}
    for task in record.tasks:
        counts[task.state] = counts.get(task.state, 0) + 1
    trials: dict[str, int] = {}
    for trial in (record.details.get("trainingOutput") or {}).get("trials", []):
        trials[str(trial.get("state"))] = trials.get(str(trial.get("state")), 0) + 1
    return {"jobId": record.name, "state": str(record.state), "backend": record.backend,
            "createTime": iso_time(record.created_at), "startTime": iso_time(record.started_at),
            "endTime": iso_time(record.ended_at), "started": record.started_at or record.created_at,
            "durationSeconds": _duration(record, time.time() if now is None else now),
            "taskStates": counts, "trialStates": trials, "parentJob": record.parent_job,
            "isStudy": bool(record.details.get("trainingOutput") or record.details.get("tuning"))}


def job_doc(record: JobRecord) -> dict[str, Any]:
    """``describe --format json``'s document (``record.to_dict()``), plus the derived ``view``."""
    logdir = output_dir(record)
    return {**record.to_dict(), "view": {
        **job_row(record), "tasks": task_rows(record), "outputDir": logdir,
        "tensorboard": f"tensorboard --logdir {logdir}" if logdir else None}}


def study_doc(record: JobRecord, trials: Mapping[str, JobRecord]) -> dict[str, Any] | None:
    """A tuning job's ``trainingOutput`` with each trial's freshest measurements and job state.

    The study rewrites its summary at most once a second, but a running trial's
    own record gets each measurement as it is read (``details.measurements``),
    so the longer of the two curves is the newer one.
    """
    output = record.details.get("trainingOutput")
    if not output:
        return None
    merged = []
    for trial in output.get("trials", []):
        child = trials.get(str(trial.get("job") or ""))
        doc = dict(trial)
        if child is not None:
            live = list(child.details.get("measurements") or [])
            if len(live) > len(doc.get("allMetrics") or []):
                doc["allMetrics"] = live
            doc["jobState"] = str(child.state)
        merged.append(doc)
    return {**dict(output), "trials": merged}


class JobReader:
    """Reads jobs for a dashboard: every job from the store, the live ones through their backend."""

    def __init__(self, home: str | Path | None = None, *, refresh: float = 3.0) -> None:
        self.store = JobStore(home)
        self.home = self.store.home
        self.refresh = refresh
        self._lock = threading.Lock()
        self._backends: dict[str, Backend] = {}
        self._asked: dict[str, tuple[float, JobRecord]] = {}

    def _backend(self, name: str) -> Backend:
        with self._lock:
            if name not in self._backends:
                self._backends[name] = get_backend(name, home=self.home)
            return self._backends[name]

    def _fresh(self, record: JobRecord) -> JobRecord:
        """A live job as its backend sees it now (at most every ``refresh`` s); an ended job as stored."""
        if record.is_final:
            return record
        now = time.monotonic()
        seen = self._asked.get(record.name)
        if seen is not None and now - seen[0] < self.refresh and seen[1].state is record.state:
            return record
        try:
            fresh = self._backend(record.backend).describe(record.name)
        except BackendError:  # kubectl gone, a cluster down: its last known state, as `jobs list` shows it
            fresh = record
        self._asked[record.name] = (now, fresh)
        return fresh

    def records(self) -> list[JobRecord]:
        """Every job in the store, newest first."""
        return [self._fresh(r) for r in self.store.records()]

    def get(self, name: str) -> JobRecord:
        """One job, as ``describe`` would report it; raises JobNameError or JobNotFoundError."""
        return self._fresh(self.store.get(validate_job_name(name)))

    def trials(self, record: JobRecord) -> dict[str, JobRecord]:
        """A tuning job's trial jobs by name (a trial deleted from the store is left out)."""
        found = {}
        for child in self.store.children(record.name):
            try:
                found[child] = self.store.get(child)
            except JobNotFoundError:
                continue
        return found
