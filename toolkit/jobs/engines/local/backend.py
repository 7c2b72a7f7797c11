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

    def __init__(self, store: JobStore, *, python: str = sys.executable, max_running: int | None = None) -> None:
        super().__init__(store, python=python)
        if max_running is not None and (isinstance(max_running, bool) or not isinstance(max_running, int)
                                        or not 1 <= max_running <= 10_000):
            raise JobSpecError([Problem("error", "max_running", f"received {max_running!r}; expected a whole "
                                        "number from 1 to 10,000. Pass how many jobs may run at once.")])
        self.max_running = max_running or default_max_running()

    def extend_details(self, spec: JobSpec, details: dict[str, Any]) -> dict[str, Any]:
        """The plan, and how many jobs may run at once (the supervisor queues the job past it)."""
        return {**super().extend_details(spec, details), "maxRunning": self.max_running}
