"""What ``describe`` and ``list`` return: immutable snapshots of a job.

The same record type serves both backends, so the CLI prints a local job and a
TFJob the same way; backend-specific facts (a manifest path, a namespace) go in
``details``.
"""
from __future__ import annotations

import datetime as _dt
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.jobs.storage.states import JobState

__all__ = ["JobRecord", "TaskRecord", "StateChange", "iso_time"]


def iso_time(ts: float | None) -> str | None:
    """A UNIX timestamp as ISO 8601 UTC (``2026-11-21T10:00:00Z``), or None."""
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class TaskRecord:
    """One task of a job (``worker-1``): its process, restarts and how it ended."""

    name: str
    state: str
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    log_path: str | None = None
    updated_at: float | None = None
    reason: str | None = None  # how the task ended when not by exiting 0 (killed, stopped, why its job ended it)

    @property
    def end(self) -> str | None:
        """How the task ended, as it was: ``exited with code 0``, ``was killed by signal SIGKILL (-9)``, the
        store's reason for a row its job's end closed; None while it runs."""
        if self.reason:
            return self.reason
        if self.exit_code is None:
            return None
        return "exited with code 0" if self.exit_code == 0 else f"exited with code {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        doc = {"name": self.name, "state": self.state, "pid": self.pid, "restarts": self.restarts,
               "exitCode": self.exit_code, "logPath": self.log_path,
               "updateTime": iso_time(self.updated_at), "end": self.end}
        if self.reason:
            doc["reason"] = self.reason
        return doc


@dataclass(frozen=True)
class StateChange:
    state: JobState
    at: float
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"state": str(self.state), "time": iso_time(self.at), "message": self.message}


@dataclass(frozen=True)
class JobRecord:
    """A job as last seen by its backend."""

    name: str
    backend: str
    state: JobState
    spec: Mapping[str, Any]
    created_at: float
    job_dir: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    error: str | None = None
    exit_code: int | None = None
    warnings: tuple[str, ...] = ()
    tasks: tuple[TaskRecord, ...] = ()
    history: tuple[StateChange, ...] = ()
    details: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}))
    parent_job: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", JobState(self.state))
        object.__setattr__(self, "details", types.MappingProxyType(dict(self.details)))

    @property
    def is_final(self) -> bool:
        return self.state.is_final

    @property
    def record_dir(self) -> str | None:
        """tfdist's own folder for the job (``logs/``, ``supervisor.log``, a TFJob's manifest).

        ``job_dir`` names the same folder, for callers written before the user's job dir was shown.
        """
        return self.job_dir

    @property
    def user_job_dir(self) -> str | None:
        """The user's job dir: what the trainer got as ``--job-dir`` (resolved), else the spec's ``jobDir``."""
        args = list((self.details.get("plan") or {}).get("args") or ())
        given = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--job-dir"]
        if given:
            return str(given[-1])
        tuning = self.details.get("tuning") or {}
        spec_dir = (self.spec.get("trainingInput") or {}).get("jobDir")
        return str(tuning["jobDir"]) if spec_dir and tuning.get("jobDir") else spec_dir

    @property
    def tuning_output_dir(self) -> str | None:
        """Where a tuning job's trials write (``<dir>/<n>``), or a trial's own directory."""
        tuning, trial = self.details.get("tuning") or {}, self.details.get("trial") or {}
        return tuning.get("jobDir") or trial.get("outputDir")

    def log_paths(self) -> dict[str, str]:
        """Each task's log file: the path the run recorded, else where the local engines write it."""
        logs = {t.name: t.log_path for t in self.tasks if t.log_path}
        if self.job_dir and self.backend != "kubernetes":
            names = list(dict.fromkeys([*(self.details.get("tasks") or ()), *(t.name for t in self.tasks)]))
            logs = {n: logs.get(n) or str(Path(self.job_dir) / "logs" / f"{n}.log") for n in names}
        return logs

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view shaped like CMLE's Job resource (``jobId``, ``state``, times).

        ``jobDir`` is the user's job dir, as in CMLE's ``trainingInput``; tfdist's own folder
        for the job is ``recordDir``.
        """
        spec = dict(self.spec)
        return {
            "jobId": self.name, "backend": self.backend, "state": str(self.state),
            "createTime": iso_time(self.created_at), "startTime": iso_time(self.started_at),
            "endTime": iso_time(self.ended_at), "errorMessage": self.error, "exitCode": self.exit_code,
            "jobDir": self.user_job_dir, "recordDir": self.record_dir,
            **({"tuningOutputDir": self.tuning_output_dir} if self.tuning_output_dir else {}),
            "logPaths": self.log_paths(), "warnings": list(self.warnings),
            "tasks": [t.to_dict() for t in self.tasks], "history": [h.to_dict() for h in self.history],
            "details": dict(self.details), **({"parentJob": self.parent_job} if self.parent_job else {}),
            **{k: v for k, v in spec.items() if k != "jobDir"},
        }
