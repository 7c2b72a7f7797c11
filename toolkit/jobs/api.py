"""What the CLI calls: submit, describe, list, stream logs, cancel.

Backends are built by name from the registry in ``toolkit.jobs.backends``
(every engine a peer behind one ``Backend`` protocol, so adding one is one
``register_backend`` call). Commands about an existing job find its backend in the
store, so ``describe JOB`` works without repeating ``--backend``.

Example:
    >>> from toolkit.jobs import JobSpec, submit, describe       # doctest: +SKIP
    >>> spec = JobSpec.from_file("job.yaml", job_id="mnist-1")  # doctest: +SKIP
    >>> submit(spec).state  # doctest: +SKIP
    <JobState.QUEUED: 'QUEUED'>
    >>> describe("mnist-1").state  # doctest: +SKIP
    <JobState.RUNNING: 'RUNNING'>
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolkit.jobs.backends import BACKENDS, Backend, get_backend
from toolkit.jobs.errors import BackendError, JobSpecError, Problem
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage.records import JobRecord
from toolkit.jobs.storage.store import JobStore

__all__ = ["Backend", "BACKENDS", "get_backend", "submit", "describe", "list_jobs", "cancel", "stream_logs"]

_log = logging.getLogger(__name__)


def _backend_of(name: str, home: str | Path | None, backend: str | None, options: dict[str, Any]) -> Backend:
    if backend is None:
        backend = JobStore(home).get(name).backend
    return get_backend(backend, home=home, **options)


def submit(spec: JobSpec, *, backend: str = "local", home: str | Path | None = None,
           **options: Any) -> JobRecord:
    """Submits ``spec`` (which must have a ``job_id``) and returns at once with its record."""
    if not spec.job_id:
        raise JobSpecError([Problem("error", "job", "is missing; expected a job name. Pass JOB.")])
    return get_backend(backend, home=home, **options).submit(spec)


def describe(name: str, *, backend: str | None = None, home: str | Path | None = None,
             **options: Any) -> JobRecord:
    """The job's current record (asking the backend, so a dead supervisor is noticed here)."""
    return _backend_of(name, home, backend, options).describe(name)


def list_jobs(*, backend: str | None = None, home: str | Path | None = None, **options: Any) -> list[JobRecord]:
    """Every job, newest first; with ``backend`` only that backend's (including TFJobs
    on the cluster that tfdist did not submit)."""
    names = list(BACKENDS) if backend is None else [backend]
    records: list[JobRecord] = []
    for name in names:
        impl = get_backend(name, home=home, **(options if backend else {}))
        if backend is None and not JobStore(home).names(backend=name):
            continue
        try:
            records.extend(impl.list())
        except BackendError as exc:
            if backend is not None:
                raise
            _log.warning("cannot refresh %s jobs (%s); showing their last known state", name, exc)
            store = JobStore(home)
            records.extend(store.get(n) for n in store.names(backend=name))
    return sorted(records, key=lambda r: r.created_at, reverse=True)


def cancel(name: str, *, backend: str | None = None, home: str | Path | None = None,
           timeout: float = 30.0, **options: Any) -> JobRecord:
    """Stops every process (or pod) of the job; returns once it is CANCELLED or ``timeout`` passed."""
    return _backend_of(name, home, backend, options).cancel(name, timeout=timeout)


def stream_logs(name: str, *, sink: Callable[[str], None], task: str | None = None,
                follow: bool = True, backend: str | None = None, home: str | Path | None = None,
                **options: Any) -> JobRecord:
    """Sends each log line, prefixed ``[worker-1]``, to ``sink`` until the job ends; returns its record."""
    return _backend_of(name, home, backend, options).stream_logs(name, task=task, sink=sink, follow=follow)
