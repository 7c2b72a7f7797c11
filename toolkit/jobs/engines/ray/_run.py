"""Runs a plan's tasks on Ray (``toolkit.launcher.ray.launch_ray``) and reports them to the store.

The Ray counterpart of ``toolkit.jobs.engines.local._run.run_tasks``, which hands plans with
``engine["name"] == "ray"`` here. Tasks are recorded as they start, restart and
end, without pids (a pid on another node means nothing here, and a reaper must
never signal it); each task's Ray node goes to the job's ``details["nodes"]``.
A cancel is seen in the store (the job turns CANCELLING) and stops every actor.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from toolkit.jobs.engines.local._local_plan import LocalPlan
from toolkit.jobs.engines.local._run_parts import RunResult, env_of, finish, launch_spec
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.storage.store import JobStore

if TYPE_CHECKING:
    from toolkit.launcher import TaskEvent

__all__ = ["run_ray_tasks"]


def _recorder(store: JobStore, job: str) -> Callable[[TaskEvent], None]:
    from toolkit.launcher import EventKind, TaskState

    def on_task(event: TaskEvent) -> None:
        if event.kind is EventKind.STARTED:
            store.update_task(job, event.name, state=TaskState.RUNNING, restarts=event.restarts,
                              log_path=str(event.log_path))
        else:
            store.update_task(job, event.name, state=TaskState.EXITED, exit_code=event.exit_code)
    return on_task


def _placement_recorder(store: JobStore, job: str) -> Callable[[dict], None]:
    def on_placement(placement: dict) -> None:
        store.update_details(job, nodes=dict(placement))
    return on_placement


class _Watch(NamedTuple):
    """What a remote engine's launch reports to the store, and how it learns of a cancel (all None: no store)."""

    on_task: Callable[[TaskEvent], None] | None = None
    on_placement: Callable[[dict], None] | None = None
    should_stop: Callable[[], bool] | None = None


def _watch(store: JobStore | None, job: str | None) -> _Watch:
    if store is None or job is None:
        return _Watch()
    recorder_store, name = store, job
    return _Watch(_recorder(recorder_store, name), _placement_recorder(recorder_store, name),
                  lambda: recorder_store.get(name).state is JobState.CANCELLING)


def _job_dir_arg(args: tuple[str, ...]) -> list[str]:
    """The trainer's ``--job-dir`` (its model_dir), which every task must be able to reach."""
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--job-dir"]


def run_ray_tasks(plan: LocalPlan, job_dir: Path | None, *, store: JobStore | None = None, job: str | None = None,
                  max_restarts: int = 0, timeout: float | None = None, stream: TextIO | None = None,
                  env: Mapping[str, str] | None = None, trial: int | None = None) -> RunResult:
    """Runs every task of ``plan`` as a Ray actor to the end of the job (the launcher's policy)."""
    from toolkit.launcher import LaunchError
    from toolkit.launcher.ray import RayOptions, launch_ray

    assert plan.engine is not None  # run_tasks sends only Ray plans here
    options = RayOptions.from_dict(plan.engine["options"])
    watch = _watch(store, job)
    try:
        spec = launch_spec(plan, max_restarts=max_restarts, timeout=timeout, trial=trial)
        result = launch_ray(
            spec, job_dir=job_dir, env={**env_of(plan), **(env or {})},
            stream=stream or sys.stdout, echo=stream is not None, options=options,
            on_task=watch.on_task, on_placement=watch.on_placement, should_stop=watch.should_stop,
            shared_paths=_job_dir_arg(plan.args))
    except LaunchError as exc:
        return RunResult(1, f"the job could not start on Ray: {exc}")
    return finish(result, store=store if job is not None else None, job=job)
