"""The local backend: each job runs as processes on this machine, under a detached supervisor.

Everything about a job's life (the record, the supervisor, ``describe``,
``cancel``, ``stream_logs``, tuning) is ``SupervisedBackend``'s, which the Ray
and Slurm backends share; here the tasks run through ``toolkit.launcher.launch``.
"""
from __future__ import annotations

from toolkit.jobs._supervised import HEARTBEAT_INTERVAL, SupervisedBackend

__all__ = ["HEARTBEAT_INTERVAL", "LocalBackend"]


class LocalBackend(SupervisedBackend):
    """Runs jobs as processes on this machine; records live in ``store``."""

    name = "local"
