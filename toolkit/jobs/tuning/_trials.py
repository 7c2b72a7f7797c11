"""One tuning trial as one job: its record, its plan, its run.

A trial is a child job in the store (``parent_job`` is the tuning job) named
``<job>-trial-<n>``, so ``describe``, ``stream-logs`` and ``cancel`` work on it
like on any job. It runs the tuning job's plan (one process, or the whole
cluster the spec asks for) with ``--job-dir <jobDir>/<n>`` and the sampled
``--name=value`` flags appended, ``task.trial`` set to ``n`` in TF_CONFIG and
``TFDIST_TRIAL_DIR`` pointing at its output directory (with cloudml-hypertune's
``CLOUD_ML_HP_METRIC_FILE`` inside it and ``CLOUD_ML_TRIAL_ID``, as on CMLE).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolkit._owned import UnsafePathError, owned_dir
from toolkit.hypertune import trial_environment
from toolkit.jobs.engines.local._local_plan import LocalPlan
from toolkit.jobs.engines.local._procs import ENV_JOB_NONCE, signal_group, start_ticks
from toolkit.jobs.errors import JobStateError
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.storage.store import JobStore

__all__ = ["TrialRun", "TrialOutcome", "trial_job_name", "run_trial", "stop_trial_early"]

_log = logging.getLogger(__name__)
MAX_RESTARTS = 3  # per task of a trial, as for any local job


def trial_job_name(job: str, number: int) -> str:
    """``mnist-hp`` trial 3 -> ``mnist-hp-trial-3`` (still a DNS-1035 label if ``job`` leaves room)."""
    return f"{job}-trial-{number}"


@dataclass(frozen=True)
class TrialRun:
    """What one trial runs: the parent's plan with the trial's directory and flags."""

    parent: str
    number: int
    plan: LocalPlan
    output_dir: str
    values: Mapping[str, Any]
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return trial_job_name(self.parent, self.number)


@dataclass(frozen=True)
class TrialOutcome:
    """How a trial's job ended (the objective is read afterwards, by the study)."""

    state: JobState
    exit_code: int | None
    error: str | None


def make_trial(parent: str, number: int, *, base: LocalPlan, job_dir: str, spec: Mapping[str, Any],
               values: Mapping[str, Any], flags: list[str]) -> TrialRun:
    """The trial's plan and the CMLE spec recorded with its job (args and jobDir filled in)."""
    output_dir = str(Path(job_dir) / str(number))
    plan = replace(base, args=(*base.args, "--job-dir", output_dir, *flags))
    training = {k: v for k, v in dict(spec.get("trainingInput", {})).items() if k != "hyperparameters"}
    training.update(args=[*training.get("args", []), *flags], jobDir=output_dir)
    return TrialRun(parent=parent, number=number, plan=plan, output_dir=output_dir, values=dict(values),
                    spec={"trainingInput": training, "jobId": trial_job_name(parent, number)})


def register_trial(store: JobStore, trial: TrialRun) -> None:
    """Records the trial's job (QUEUED, owned by this supervisor process)."""
    backend = "local" if trial.plan.engine is None else trial.plan.engine["name"]
    store.create(trial.name, backend=backend, spec=trial.spec, parent_job=trial.parent,
                 details={"plan": trial.plan.to_dict(), "tasks": trial.plan.task_names,
                          "trial": {"parentJob": trial.parent, "trialId": str(trial.number),
                                    "values": dict(trial.values), "outputDir": trial.output_dir}})
    store.set_supervisor(trial.name, pid=os.getpid(), start_ticks=start_ticks(os.getpid()),
                         host=socket.gethostname(), nonce=os.environ.get(ENV_JOB_NONCE))


def run_trial(store: JobStore, trial: TrialRun, *, timeout: float | None = None) -> TrialOutcome:
    """Runs a registered trial to its end in this thread; the store records every step."""
    from toolkit.jobs.engines.local._run import run_tasks

    name = trial.name
    job_dir = store.job_dir(name)
    try:  # a trial directory another user made first could hold planted metrics or symlinks
        owned_dir(job_dir, what=f"trial {name!r}'s directory")
        owned_dir(job_dir / "logs", what=f"trial {name!r}'s logs directory")
        owned_dir(trial.output_dir, what=f"trial {name!r}'s output directory")
    except UnsafePathError as exc:
        return _finish(store, name, TrialOutcome(JobState.FAILED, None, str(exc)))
    if not (store.advance(name, JobState.PREPARING, message="starting tasks")
            and store.advance(name, JobState.RUNNING, message=_describe_values(trial.values))):
        return _finish(store, name, TrialOutcome(JobState.CANCELLED, None, "cancelled before it started"))
    started = time.monotonic()
    env = trial_environment(trial.output_dir, trial.number)
    result = run_tasks(trial.plan, job_dir, store=store, job=name, max_restarts=MAX_RESTARTS,
                       timeout=timeout, env=env, stream=None, trial=trial.number)
    _log.info("trial %s ended with exit code %d after %.1f s", name, result.exit_code, time.monotonic() - started)
    record = store.get(name)
    if record.state is JobState.CANCELLING:
        outcome = TrialOutcome(JobState.CANCELLED, result.exit_code, record.details.get("stoppedEarly") or "cancelled")
    elif result.exit_code == 0:
        outcome = TrialOutcome(JobState.SUCCEEDED, 0, None)
    else:
        outcome = TrialOutcome(JobState.FAILED, result.exit_code, result.error)
    return _finish(store, name, outcome)


def stop_trial_early(store: JobStore, trial: TrialRun, reason: str) -> bool:
    """Stops a running trial as a cancel does (CANCELLING: its tasks are signalled, a Ray run stops its
    actors), with ``reason`` as the message it ends with; False if it ended first."""
    store.update_details(trial.name, stoppedEarly=reason)
    try:
        store.transition(trial.name, JobState.CANCELLING, message=reason)
    except JobStateError:
        return False  # it ended (or was cancelled) on its own: nothing to stop
    stop_groups_once(store, trial.name)
    return True


def _describe_values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _finish(store: JobStore, name: str, outcome: TrialOutcome) -> TrialOutcome:
    state = outcome.state
    if state is JobState.CANCELLED and store.get(name).state is not JobState.CANCELLING:
        store.transition(name, JobState.CANCELLING, message="the tuning job stopped this trial")
    try:
        store.transition(name, state, exit_code=outcome.exit_code,
                         **({"error": outcome.error} if state is JobState.FAILED else {"message": outcome.error}))
    except JobStateError:  # cancelled while its tasks were ending: the cancel wins
        if store.get(name).state is not JobState.CANCELLING:
            raise
        store.transition(name, JobState.CANCELLED, message="cancelled")
        return TrialOutcome(JobState.CANCELLED, outcome.exit_code, "cancelled")
    return outcome


def stop_groups_once(store: JobStore, name: str) -> None:
    """SIGTERM to every process group the trial's tasks recorded (the study repeats it until they are gone)."""
    nonce = store.supervisor(name).nonce
    for _, pid, ticks in store.task_processes(name):
        signal_group(pid, ticks, signal.SIGTERM, nonce=nonce)
