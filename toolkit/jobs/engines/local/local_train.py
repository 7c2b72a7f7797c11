"""``tfdist local train``: a trainer in the foreground, no job store (gcloud's local train).

The module runs exactly as a submitted job's tasks do (same PYTHONPATH, working
directory, ``--job-dir`` and TF_CONFIG dialect), so a trainer that works here
works when submitted.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from toolkit.jobs.engines.local._local_plan import plan_local
from toolkit.jobs.errors import JobSpecError, Problem
from toolkit.jobs.model.spec import JobSpec

__all__ = ["local_train"]

_log = logging.getLogger(__name__)

# spec field -> this function's argument, so an error names what the caller passed
_ARGUMENTS = {"trainingInput.workerCount": "workers", "trainingInput.parameterServerCount": "ps",
              "trainingInput.evaluatorCount": "evaluators", "trainingInput.pythonModule": "module",
              "trainingInput.jobDir": "job_dir", "trainingInput.packagePath": "package_path"}


def _spec(module: str, args: Sequence[str], package_path: str | None, job_dir: str | None, distributed: bool,
          counts: dict[str, int], use_chief: bool) -> JobSpec:
    fields = {"pythonModule": module, "args": list(args), "useChiefInTfConfig": use_chief,
              "packagePath": package_path, "jobDir": job_dir, "scaleTier": "BASIC"}
    if distributed:
        fields.update(scaleTier="CUSTOM", masterType="standard", **counts)
        fields.update({f"{key[:-5]}Type": "standard" for key, n in counts.items() if n})
    try:
        return JobSpec.from_dict({}, overrides={k: v for k, v in fields.items() if v is not None})
    except JobSpecError as exc:
        raise _as_arguments(exc) from None


def _as_arguments(exc: JobSpecError) -> JobSpecError:
    """The same problems, each named by the argument of ``local_train`` that set the field."""
    return JobSpecError([Problem(p.severity, _ARGUMENTS.get(p.field, p.field), p.message) for p in exc.problems])


def local_train(module: str, *, args: Sequence[str] = (), package_path: str | None = None,
                job_dir: str | None = None, distributed: bool = False, workers: int = 2, ps: int = 2,
                evaluators: int = 0, use_chief: bool = False, timeout: float | None = None,
                stream: TextIO = sys.stdout) -> int:
    """Runs ``python -m module args`` here and returns its exit code (the chief's when distributed).

    Raises:
        JobSpecError: an argument is invalid (named as the argument, e.g. ``workers``).
    """
    counts = {"workerCount": workers, "parameterServerCount": ps, "evaluatorCount": evaluators}
    spec = _spec(module, args, package_path, job_dir, distributed, counts, use_chief)
    try:
        plan, warnings = plan_local(spec, cwd=Path.cwd(), machines_given=False)
    except JobSpecError as exc:
        raise _as_arguments(exc) from None
    for warning in [f"{p.field.removeprefix('trainingInput.')}: {p.message}" for p in spec.warnings] + warnings:
        _log.warning("%s", warning)
    if distributed:
        from toolkit.jobs.engines.local._run import run_tasks
        return run_tasks(plan, None, timeout=timeout, stream=stream).exit_code
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CONFIG=json.dumps(
        {"cluster": {}, "environment": "cloud", "job": plan.training_input}))
    env["PYTHONPATH"] = os.pathsep.join([*plan.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
    try:
        return subprocess.run(plan.argv, env=env, cwd=plan.cwd, timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
        return 124
