"""Runs a plan's tasks on its engine and reports them to the store.

``RUNNERS`` maps an engine's name (the plan's ``engine["name"]``; ``local`` when
it has none) to the function that runs the tasks there: ``toolkit.launcher.launch``
on this machine, ``engines.ray._run`` on Ray, ``engines.slurm._run`` on Slurm. Every runner takes
the same arguments and returns a ``RunResult``.

The launcher runs every task in the job's directory and CMLE dialect
(``cmle_dialect``: the primary task is ``master-0`` unless the job sets
``useChiefInTfConfig``, TF_CONFIG carries ``"environment": "cloud"``, the
job's ``trainingInput`` as ``"job"`` and, in a tuning trial, ``task.trial``),
so its task names, log files and messages are already the job's.

The launcher tells us (``on_task``) each time a task starts, restarts or exits;
each start records the task's pid (with its start time, so a later reaper never
kills a reused pid) and its restarts. When the launcher returns, its results give
every task's final state and exit code.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from toolkit.jobs.engines.local._local_plan import LocalPlan
from toolkit.jobs.engines.local._run_parts import RunResult, env_of, finish, launch_spec, recorder, task_name
from toolkit.jobs.storage.store import JobStore

__all__ = ["RUNNERS", "RunResult", "run_tasks", "task_name"]


def run_tasks(plan: LocalPlan, job_dir: Path | None, *, store: JobStore | None = None, job: str | None = None,
              max_restarts: int = 0, timeout: float | None = None, stream: TextIO | None = None,
              env: Mapping[str, str] | None = None, trial: int | None = None) -> RunResult:
    """Runs every task of ``plan`` to the end of the job (launcher policy) on the plan's engine.

    With ``store`` and ``job`` the tasks are recorded as they start, restart and end;
    with ``stream`` their prefixed output is echoed there as well as logged per task.
    ``env`` adds variables to every task (a tuning trial's directory); ``trial`` is the
    tuning trial's number, which TF_CONFIG carries as ``task.trial``.
    """
    engine = (plan.engine or {}).get("name", "local")
    if plan.job_dir:  # before any task starts: no `if not exists: makedirs` race between the tasks
        Path(plan.job_dir).mkdir(parents=True, exist_ok=True)
    return RUNNERS[engine](plan, job_dir, store=store, job=job, max_restarts=max_restarts, timeout=timeout,
                           stream=stream, env=env, trial=trial)


def _run_local(plan: LocalPlan, job_dir: Path | None, *, store: JobStore | None = None, job: str | None = None,
               max_restarts: int = 0, timeout: float | None = None, stream: TextIO | None = None,
               env: Mapping[str, str] | None = None, trial: int | None = None) -> RunResult:
    from toolkit.launcher import launch

    spec = launch_spec(plan, max_restarts=max_restarts, timeout=timeout, trial=trial)
    on_task = recorder(store, job) if store is not None and job is not None else None
    result = launch(spec, job_dir=job_dir, env={**env_of(plan), **(env or {})}, stream=stream or sys.stdout,
                    echo=stream is not None, on_task=on_task)
    return finish(result, store=store, job=job)


def _run_ray(plan: LocalPlan, job_dir: Path | None, **kwargs: Any) -> RunResult:
    from toolkit.jobs.engines.ray._run import run_ray_tasks
    return run_ray_tasks(plan, job_dir, **kwargs)


def _run_slurm(plan: LocalPlan, job_dir: Path | None, **kwargs: Any) -> RunResult:
    from toolkit.jobs.engines.slurm._run import run_slurm_tasks
    return run_slurm_tasks(plan, job_dir, **kwargs)


RUNNERS: dict[str, Callable[..., RunResult]] = {"local": _run_local, "ray": _run_ray, "slurm": _run_slurm}
