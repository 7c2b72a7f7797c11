"""Where jobs run: the ``Backend`` protocol and the registry that picks one by name.

Every engine (processes on this machine, a Ray cluster, a Slurm cluster,
Kubernetes) is a peer behind the same small protocol: ``submit`` a spec,
``describe`` / ``list`` its state, ``stream_logs``, ``cancel``. What sits on
top (the CLI, tuning, the failure policy) speaks only this protocol, so a new
engine is one ``register_backend`` call and no edit to another backend.

Each entry names the constructor options it accepts; an option that belongs to
another backend gets an error saying which one.

Example:
    >>> from toolkit.jobs.backends import REGISTRY
    >>> sorted(REGISTRY)
    ['kubernetes', 'local', 'ray', 'slurm']
    >>> REGISTRY["ray"].options
    ('address', 'placement', 'shared_job_dir')
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolkit.jobs.errors import JobSpecError, Problem, did_you_mean
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage.records import JobRecord
from toolkit.jobs.storage.store import JobStore

__all__ = ["BACKENDS", "Backend", "BackendEntry", "REGISTRY", "get_backend", "register_backend"]


@runtime_checkable
class Backend(Protocol):
    """What every engine implements; records live in the job store either way."""

    name: str

    def submit(self, spec: JobSpec) -> JobRecord: ...
    def describe(self, name: str) -> JobRecord: ...
    def list(self) -> list[JobRecord]: ...
    def cancel(self, name: str, *, timeout: float = 30.0) -> JobRecord: ...
    def stream_logs(self, name: str, *, task: str | None = None, sink: Callable[[str], None],
                    follow: bool = True, poll_interval: float = 0.5) -> JobRecord: ...


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend: how to build it and which options it takes."""

    name: str
    build: Callable[..., Backend]  # build(store, **options)
    options: tuple[str, ...] = ()
    summary: str = ""


REGISTRY: dict[str, BackendEntry] = {}


def register_backend(name: str, build: Callable[..., Backend], *, options: tuple[str, ...] = (),
                     summary: str = "") -> None:
    """Adds (or replaces) the backend called ``name``; ``build(store, **options)`` makes one."""
    REGISTRY[name] = BackendEntry(name, build, tuple(options), summary)
    BACKENDS[name] = _checked(REGISTRY[name])


def _owners(option: str) -> list[str]:
    return [entry.name for entry in REGISTRY.values() if option in entry.options]


def _checked(entry: BackendEntry) -> Callable[..., Backend]:
    """``entry.build`` behind a check that every option is one this backend takes."""
    def build(store: JobStore, **options: Any) -> Backend:
        stray = sorted(set(options) - set(entry.options))
        if stray:
            owners = _owners(stray[0])
            where = " and ".join(owners) + (" backends" if len(owners) > 1 else " backend")
            switch = " or ".join(f"`backend='{o}'`" for o in owners)
            if not owners:
                message = f"does not apply to the {entry.name} backend; remove it."
            elif not entry.options or entry.name == "local":  # local: the default, perhaps not chosen at all
                message = f"applies to the {where} only; remove it or pass {switch}."
            else:
                message = (f"does not apply to the {entry.name} backend (only to the {where}); "
                           f"remove it or pass {switch}.")
            raise JobSpecError([Problem("error", stray[0], message)])
        return entry.build(store, **options)
    return build


BACKENDS: dict[str, Callable[..., Backend]] = {}


def get_backend(name: str, *, home: str | Path | None = None, **options: Any) -> Backend:
    """Builds the backend called ``name``; ``options`` go to its constructor."""
    if name not in BACKENDS:
        raise JobSpecError([Problem("error", "backend", f"received {name!r}; expected one of "
                                    f"{', '.join(BACKENDS)}.{did_you_mean(name, BACKENDS)}")])
    return BACKENDS[name](JobStore(home), **options)


def _local(store: JobStore, **options: Any) -> Backend:
    from toolkit.jobs.engines.local.backend import LocalBackend
    return LocalBackend(store, **options)


def _ray(store: JobStore, **options: Any) -> Backend:
    from toolkit.jobs.engines.ray.backend import RayBackend
    return RayBackend(store, **options)


def _slurm(store: JobStore, **options: Any) -> Backend:
    from toolkit.jobs.engines.slurm.backend import SlurmBackend
    return SlurmBackend(store, **options)


def _kubernetes(store: JobStore, **options: Any) -> Backend:
    from toolkit.jobs.engines.kubernetes.backend import KubernetesBackend
    from toolkit.jobs.engines.kubernetes.tfjob import KubernetesOptions
    return KubernetesBackend(store, options=KubernetesOptions(**options))


def _kubernetes_options() -> tuple[str, ...]:
    from toolkit.jobs.engines.kubernetes.tfjob import KubernetesOptions
    return tuple(f.name for f in fields(KubernetesOptions))


register_backend("local", _local, options=("max_running", "max_log_bytes", "log_backups"),
                 summary="processes on this machine, under a detached supervisor")
register_backend("kubernetes", _kubernetes, options=_kubernetes_options(),
                 summary="a Kubeflow TFJob applied with kubectl")
register_backend("ray", _ray, options=("address", "placement", "shared_job_dir"),
                 summary="one Ray actor per task on a Ray cluster")
register_backend("slurm", _slurm, options=("partition", "time_limit", "nodes", "shared_job_dir", "port",
                                           "sbatch_args"),
                 summary="one sbatch per job, one srun task per TensorFlow task")
