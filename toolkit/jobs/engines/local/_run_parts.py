"""What the job runners share: the job's result, its launch spec, its tasks' environment, the
store recorder, and the final bookkeeping.

A leaf below the runners, so that ``_run`` (which hands Ray and Slurm plans on)
and the engine runners import it and never each other.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import toolkit
from toolkit.jobs.engines.local._local_plan import LocalPlan
from toolkit.jobs.engines.local._procs import start_ticks
from toolkit.jobs.errors import BackendError
from toolkit.jobs.storage.store import JobStore

if TYPE_CHECKING:
    from toolkit.launcher import Dialect, LaunchResult, LaunchSpec, TaskEvent

logger = logging.getLogger(__name__)

__all__ = ["ENV_USER_JOB_DIR", "RunResult", "dialect_of", "env_of", "finish", "launch_spec", "recorder", "task_name"]


@dataclass(frozen=True)
class RunResult:
    """How the tasks ended: the job's exit code, its error (None on success), and ``clean``: every task exited
    0 by itself, so the job succeeded whatever a cancel racing its end asked for. ``message`` says how a
    success ended when not every task did so cleanly (``LaunchResult.message``)."""

    exit_code: int
    error: str | None
    clean: bool = False
    message: str | None = None


def task_name(launcher_name: str, primary: str) -> str:
    """A log file's task name as the job calls it: jobs run before the launcher spoke CMLE's dialect
    logged their primary task as ``chief-0`` (it is ``master-0``, unless ``useChiefInTfConfig``)."""
    kind, _, index = launcher_name.rpartition("-")
    return f"{primary}-{index}" if kind == "chief" else launcher_name


def recorder(store: JobStore, job: str) -> Callable[[TaskEvent], None]:
    """An ``on_task`` callback that keeps the store's view of each task current."""
    from toolkit.launcher import EventKind, TaskState

    def on_task(event: TaskEvent) -> None:
        if event.kind is EventKind.STARTED:
            store.update_task(job, event.name, state=TaskState.RUNNING, pid=event.pid,
                              pid_start=start_ticks(event.pid), restarts=event.restarts)
        else:
            store.update_task(job, event.name, state=TaskState.EXITED)

    return on_task


def dialect_of(plan: LocalPlan, trial: int | None = None) -> Dialect:
    """The job's TF_CONFIG dialect: CMLE's, with its trainingInput and the tuning trial."""
    from toolkit.launcher import cmle_dialect

    return cmle_dialect(job=plan.training_input, trial=trial, use_chief=plan.primary == "chief")


def launch_spec(plan: LocalPlan, *, max_restarts: int, timeout: float | None, trial: int | None) -> LaunchSpec:
    """The plan's cluster as one launch: a chief, its workers, ps and evaluator, in the job's dialect."""
    from toolkit.launcher import LaunchSpec

    counts, logs = plan.counts, plan.logs or {}
    return LaunchSpec(cmd=tuple(plan.argv), chief=1, workers=counts.get("worker", 0), ps=counts.get("ps", 0),
                      evaluator=counts.get("evaluator", 0), max_restarts=max_restarts,
                      timeout=timeout if timeout is not None else plan.timeout,
                      dialect=dialect_of(plan, trial), cwd=plan.cwd, max_log_bytes=logs.get("maxBytes"),
                      log_backups=logs.get("backups", 0))


#: the user's ``--job-dir`` in every task of a job that has one (docs/jobs.md: what the tasks share)
ENV_USER_JOB_DIR = "TFDIST_USER_JOB_DIR"


def env_of(plan: LocalPlan) -> dict[str, str]:
    root = str(Path(toolkit.__file__).resolve().parents[1])
    pythonpath = [*plan.pythonpath, root, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(pythonpath)}
    if plan.job_dir:  # the launcher's sitecustomize lets every task create it again, as on CMLE
        env[ENV_USER_JOB_DIR] = plan.job_dir
    return env


def restart_counts(result: LaunchResult) -> dict[str, Any]:
    """The restarts a launch made, preemptions apart from failures (``describe`` shows them)."""
    preempted = {t.name: t.preemptions for t in result.tasks if t.preemptions}
    return {"preemptions": result.preemptions, "failures": result.failures, "preemptedTasks": preempted}


#: what the launcher's sitecustomize leaves in a task's directory when the task never read TF_CONFIG
UNREAD_TF_CONFIG = "tf_config.unread"


def no_strategy(result: LaunchResult) -> dict[str, Any] | None:
    """The tasks of a cluster that never read TF_CONFIG, so trained alone, and what to say about it."""
    alone = [t.name for t in result.tasks if (result.job_dir / "tasks" / t.name / UNREAD_TF_CONFIG).exists()]
    if len(result.tasks) < 2 or not alone:
        return None
    return {"tasks": alone, "message": (
        f"{', '.join(alone)} never read TF_CONFIG, so trained under no distribution strategy: each trained a "
        f"model of its own and wrote its own output, although the job has {len(result.tasks)} tasks (CMLE "
        "runs such a trainer the same way). Build the model under a strategy (strategies.make_strategy(), or "
        "TensorFlow's MultiWorkerMirroredStrategy or ParameterServerStrategy), or submit it with scaleTier BASIC.")}


def finish(result: LaunchResult, *, store: JobStore | None, job: str | None) -> RunResult:
    """Records each task's final state (when a store is given) and turns the launch into the job's result."""
    if store is not None and job is not None:
        try:
            _record_tasks(result, store, job)
        except BackendError as exc:  # a full disk under the store: the job's end is still told (supervisor)
            logger.error("could not record how the tasks of job %s ended: %s", job, exc)
    clean = result.ok and not result.unclean
    return RunResult(result.exit_code, None if result.ok else result.message, clean=clean,
                     message=None if clean or not result.ok else result.message)


def _record_tasks(result: LaunchResult, store: JobStore, job: str) -> None:
    """Each task's final state and exit code, the restarts, and what the logs lost."""
    for task in result.tasks:
        store.update_task(job, task.name, state=task.state, exit_code=task.exit_code,
                          restarts=task.restarts, log_path=str(task.log_path),
                          reason=None if task.exit_code == 0 else task.end)
    store.update_details(job, restarts=restart_counts(result))
    alone = no_strategy(result)
    if alone is not None:
        logger.warning("%s", alone["message"])
        store.update_details(job, noStrategy=alone)
    lost = {t.name: t.log_problem for t in result.tasks if t.log_problem}
    if lost:  # a full disk (ENOSPC) or the log cap: the logs are not the whole output
        store.update_details(job, logProblems=lost)
