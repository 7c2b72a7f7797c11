"""Runs a plan's tasks as one Slurm job (``toolkit.launcher.slurm.launch_slurm``) and reports them.

The Slurm counterpart of ``_run_local`` and Ray's ``_run``: tasks are recorded as
they start, restart and end (without pids: they run on the cluster's nodes);
each task's node goes to the job's ``details["nodes"]`` and the Slurm job id to
``details["slurm"]``, so a reaper can ``scancel`` it. A cancel is seen in the
store (the job turns CANCELLING) and ends in ``scancel``. A preempted job is
always submitted again on ``max_preemptions``: the job's trainer resumes from
its ``--job-dir``, as a CMLE trainer does when its master is restarted.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from toolkit.jobs.engines.local._local_plan import LocalPlan
from toolkit.jobs.engines.local._run_parts import RunResult, env_of, finish, launch_spec
from toolkit.jobs.engines.ray._run import _job_dir_arg, _watch
from toolkit.jobs.storage.store import JobStore

__all__ = ["run_slurm_tasks"]


def run_slurm_tasks(plan: LocalPlan, job_dir: Path | None, *, store: JobStore | None = None, job: str | None = None,
                    max_restarts: int = 0, timeout: float | None = None, stream: TextIO | None = None,
                    env: Mapping[str, str] | None = None, trial: int | None = None) -> RunResult:
    """Runs every task of ``plan`` as one Slurm job, to the end of the job (the launcher's policy)."""
    from toolkit.launcher import LaunchError
    from toolkit.launcher.slurm import SlurmOptions, launch_slurm

    assert plan.engine is not None  # run_tasks sends only Slurm plans here
    options = SlurmOptions.from_dict(plan.engine["options"])
    watch = _watch(store, job)
    on_job = None
    if store is not None and job is not None:
        recorder_store, name = store, job

        def on_job(progress: dict[str, Any]) -> None:  # kept as the run goes: a cancel cuts finish() short
            jobs = progress["jobs"]
            recorder_store.update_details(name, slurm={"job_id": jobs[-1]["job_id"], "jobs": jobs},
                                          restarts=progress["restarts"])
    try:
        spec = launch_spec(plan, max_restarts=max_restarts, timeout=timeout, trial=trial)
        result = launch_slurm(spec, job_dir=Path(job_dir or Path.cwd() / "slurm-job"),
                              env={**env_of(plan), **(env or {})}, stream=stream, options=options,
                              on_task=watch.on_task, on_placement=watch.on_placement, on_job=on_job,
                              should_stop=watch.should_stop, shared_paths=tuple(_job_dir_arg(plan.args)),
                              resubmit_preempted=True)
    except LaunchError as exc:
        return RunResult(1, f"the job could not start on Slurm: {exc}")
    return finish(result, store=store if job is not None else None, job=job)
