"""Submit-time checks and the stored plan of a tuning job.

Whatever would stop the study halfway (a job name too long for its trials'
names, a grid Optuna cannot build, a study to resume that does not exist) is
refused here, before a supervisor starts.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from toolkit.jobs.engines.local._local_plan import plan_local
from toolkit.jobs.errors import JobNotFoundError, JobSpecError, Problem
from toolkit.jobs.model.names import MAX_NAME_LENGTH
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage.store import JobStore
from toolkit.jobs.tuning._space import make_sampler, trial_budget
from toolkit.jobs.tuning._trials import trial_job_name

__all__ = ["plan_tuning"]

_FIELD = "trainingInput.hyperparameters"


def _check(spec: JobSpec, store: JobStore) -> None:
    hp = spec.training_input.hyperparameters
    assert hp is not None  # only tuning specs come here
    job_id = spec.required_job_id
    longest = trial_job_name(job_id, trial_budget(hp))
    problems = []
    if len(longest) > MAX_NAME_LENGTH:
        room = MAX_NAME_LENGTH - (len(longest) - len(job_id))
        problems.append(Problem("error", "job", f"received {job_id!r} ({len(job_id)} characters); its "
                                f"trials are named like {longest!r}, longer than {MAX_NAME_LENGTH}. Use a job name "
                                f"of at most {room} characters."))
    previous = hp.resume_previous_job_id
    if previous:
        try:
            old = store.get(previous)
        except JobNotFoundError:
            old = None
        if old is None or "tuning" not in old.details:
            problems.append(Problem("error", f"{_FIELD}.resumePreviousJobId", f"received {previous!r}, which is "
                                    "not a tuning job in this store. Name an earlier tuning job, or remove it."))
    if problems:
        raise JobSpecError(problems)
    make_sampler(hp)  # a grid that cannot be built fails now, not in the supervisor


def plan_tuning(spec: JobSpec, store: JobStore, *, cwd: Path, python: str) -> tuple[dict[str, Any], list[str]]:
    """The tuning job's ``details`` (every trial's base plan, the study's jobDir) and plan warnings.

    Trials write under ``jobDir/<trial>``; without a jobDir, under ``<job's store dir>/output``.
    """
    _check(spec, store)
    ti = spec.training_input
    assert ti.hyperparameters is not None  # only tuning specs come here
    plan, warnings = plan_local(spec, cwd=cwd, python=python)  # validates jobDir and the package as for any job
    base, _ = plan_local(JobSpec(training_input=replace(ti, job_dir=None), job_id=spec.job_id),
                         cwd=cwd, python=python, machines_given=False)
    job_dir = str((cwd / ti.job_dir).resolve()) if ti.job_dir else str(store.job_dir(spec.required_job_id) / "output")
    base = replace(base, training_input=plan.training_input)  # TF_CONFIG's `job` shows the whole study, as on CMLE
    details = {"plan": base.to_dict(), "tasks": ["study"],
               "tuning": {"jobDir": job_dir, "trialTasks": base.task_names,
                          "maxTrials": trial_budget(ti.hyperparameters)},
               # the store reserves every trial's name with the job, so none is taken halfway
               "reservedNames": [trial_job_name(spec.required_job_id, n)
                                 for n in range(1, trial_budget(ti.hyperparameters) + 1)]}
    return details, warnings
