"""The local backend: each job runs as processes on this machine, under a detached supervisor.

Everything about a job's life (the record, the supervisor, ``describe``,
``cancel``, ``stream_logs``, tuning) is ``SupervisedBackend``'s, which the Ray
and Slurm backends share; here the tasks run through ``toolkit.launcher.launch``.
"""
from __future__ import annotations

import sys
from typing import Any

from toolkit.jobs.engines.local._local_plan import local_capacity
from toolkit.jobs.engines.local._supervised import HEARTBEAT_INTERVAL, SupervisedBackend
from toolkit.jobs.errors import JobSpecError, Problem
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage.store import JobStore

__all__ = ["HEARTBEAT_INTERVAL", "LocalBackend", "default_max_running"]


def default_max_running() -> int:
    """Jobs this machine runs at once by default: half the tasks ``local_capacity`` says it holds (a job is
    a supervisor and at least one TensorFlow task), at least one."""
    return max(1, local_capacity()[0] // 2)


class LocalBackend(SupervisedBackend):
    """Runs jobs as processes on this machine; records live in ``store``.

    At most ``max_running`` of this home's local jobs run at once (default ``default_max_running()``);
    a job submitted beyond that stays QUEUED, its supervisor waiting, until one ends.
    """

    name = "local"

    def __init__(self, store: JobStore, *, python: str = sys.executable, max_running: int | None = None,
                 max_log_bytes: int | None = None, log_backups: int = 0) -> None:
        super().__init__(store, python=python)
        if max_running is not None and (isinstance(max_running, bool) or not isinstance(max_running, int)
                                        or not 1 <= max_running <= 10_000):
            raise JobSpecError([Problem("error", "max_running", f"received {max_running!r}; expected a whole "
                                        "number from 1 to 10,000. Pass how many jobs may run at once.")])
        self.max_running = max_running or default_max_running()
        self.logs = _log_limits(max_log_bytes, log_backups)

    def extend_details(self, spec: JobSpec, details: dict[str, Any]) -> dict[str, Any]:
        """The plan (with its log cap or rotation), and how many jobs may run at once (the supervisor queues the
        job past it)."""
        details = {**super().extend_details(spec, details), "maxRunning": self.max_running}
        if self.logs is not None and "plan" in details:
            details["plan"] = {**dict(details["plan"]), "logs": self.logs}
        return details


def _log_limits(max_bytes: int | None, backups: int) -> dict[str, int] | None:
    """``{"maxBytes", "backups"}`` for the launcher (``max_log_bytes``, ``log_backups``), checked; None: all."""
    def bad(value: object, low: int) -> bool:
        return isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 2 ** 62

    if max_bytes is not None and bad(max_bytes, 1):
        raise JobSpecError([Problem("error", "max_log_bytes", f"received {max_bytes!r}; expected a whole number of "
                                    "bytes, at least 1. Pass the most each task's log keeps.")])
    if bad(backups, 0) or backups > 1000:
        raise JobSpecError([Problem("error", "log_backups", f"received {backups!r}; expected a whole number from 0 "
                                    "to 1,000. Pass how many rotated files each task's log keeps.")])
    if backups and max_bytes is None:
        raise JobSpecError([Problem("error", "log_backups", f"received {backups}, but max_log_bytes is not set; a "
                                    "log rotates when it reaches max_log_bytes. Pass max_log_bytes too.")])
    return None if max_bytes is None else {"maxBytes": max_bytes, "backups": backups}
