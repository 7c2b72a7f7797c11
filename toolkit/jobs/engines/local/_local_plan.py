"""Turns a JobSpec into what the local backend runs: argv, counts, paths, warnings.

Everything that can be wrong about running a spec *here* (a gs:// package, a
missing --package-path, more tasks than this machine holds) is found at
``submit`` time, before a supervisor starts, so the user sees it at once.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from toolkit._owned import UnsafePathError, check_code_dir
from toolkit.jobs.errors import JobSpecError, Problem
from toolkit.jobs.model._exec_limits import exec_problems
from toolkit.jobs.model.spec import JobSpec

_URI = re.compile(r"[a-z][a-z0-9+.-]*://")
MIB_PER_TASK = 650  # an MWMS worker's RSS after importing TensorFlow (see the platform notes)
TASKS_PER_CPU = 4


@dataclass(frozen=True)
class LocalPlan:
    """Everything the supervisor needs, stored with the job so it never re-reads the spec."""

    module: str
    args: tuple[str, ...]
    counts: dict[str, int]
    primary: str
    pythonpath: tuple[str, ...]
    cwd: str
    python: str
    timeout: int | None
    training_input: dict[str, Any]
    engine: dict[str, Any] | None = None  # where the tasks run: None on this machine, {"name": "ray", ...}
    logs: dict[str, int] | None = None  # {"maxBytes": N, "backups": K}: each task's log capped or rotated

    @property
    def argv(self) -> list[str]:
        return [self.python, "-m", self.module, *self.args]

    @property
    def job_dir(self) -> str | None:
        """The user's job dir, as the tasks get it (``--job-dir``, resolved; a trial's own), or None."""
        args = list(self.args)
        where = [i for i, arg in enumerate(args[:-1]) if arg == "--job-dir"]
        return args[where[-1] + 1] if where else None

    @property
    def task_names(self) -> list[str]:
        return [f"{kind}-{i}" for kind, n in self.counts.items() for i in range(n)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> LocalPlan:
        return cls(**{**doc, "args": tuple(doc["args"]), "pythonpath": tuple(doc["pythonpath"])})


def local_capacity() -> tuple[int, str]:
    """How many TensorFlow tasks this machine holds, and why (for the scale-down warning)."""
    cpus = os.cpu_count() or 1
    try:
        mem_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        mem_mib = cpus * TASKS_PER_CPU * MIB_PER_TASK
    capacity = max(2, min(cpus * TASKS_PER_CPU, mem_mib // MIB_PER_TASK))
    return capacity, (f"{cpus} CPUs and {mem_mib // 1024} GiB hold {capacity} tasks "
                      f"({TASKS_PER_CPU} per CPU, {MIB_PER_TASK} MiB each)")


def _scaled(counts: dict[str, int], capacity: int) -> dict[str, int]:
    """Shrinks workers and ps in proportion, keeping the primary and at least one of each."""
    primary = next(iter(counts))
    workers, ps = counts.get("worker", 0), counts.get("ps", 0)
    room = capacity - 1 - counts.get("evaluator", 0)
    new_ps = max(1, round(room * ps / (workers + ps))) if ps else 0
    new_workers = max(1, room - new_ps) if workers else 0
    scaled = {primary: 1, "worker": new_workers, "ps": new_ps, "evaluator": counts.get("evaluator", 0)}
    return {k: v for k, v in scaled.items() if v}


def _describe_counts(counts: dict[str, int]) -> str:
    return " + ".join(f"{n} {k}" for k, n in counts.items())


def plan_local(spec: JobSpec, *, cwd: Path, python: str = sys.executable,
               machines_given: bool = True) -> tuple[LocalPlan, list[str]]:
    """The local run of ``spec``; raises JobSpecError for what cannot run here.

    ``machines_given=False`` says the machine types were filled in by tfdist, not
    the user, so there is nothing to warn about.
    """
    ti = spec.training_input
    problems: list[Problem] = []
    warnings: list[str] = []
    if ti.python_module is None:
        problems.append(Problem("error", "trainingInput.pythonModule", "is missing; the local backend runs "
                                "`python -m MODULE` and cannot run a container image. Set pythonModule, or "
                                "submit with `backend='kubernetes'`."))
    pythonpath, run_dir = _package_paths(ti, cwd, problems)
    args = list(ti.args)
    if ti.job_dir:
        if _URI.match(ti.job_dir):
            problems.append(Problem("error", "trainingInput.jobDir", f"received {ti.job_dir!r}; the local "
                                    "backend writes to this machine's disk. Set jobDir to a local path."))
        args += ["--job-dir", str((cwd / ti.job_dir).resolve())]
    if problems:
        raise JobSpecError(problems)
    assert ti.python_module is not None  # refused above
    counts = ti.task_counts
    capacity, why = local_capacity()
    if sum(counts.values()) > capacity:
        if ti.scale_tier == "CUSTOM":
            warnings.append(f"{_describe_counts(counts)} is more than this machine holds ({why}); "
                            "expect it to be slow or to run out of memory.")
        else:
            scaled = _scaled(counts, capacity)
            warnings.append(f"scaleTier {ti.scale_tier} means {_describe_counts(counts)}; {why}, so the local "
                            f"backend runs {_describe_counts(scaled)}. Use scaleTier CUSTOM to choose counts.")
            counts = scaled
    warnings += _ignored_fields(spec, machines_given)
    plan = LocalPlan(module=ti.python_module, args=tuple(args), counts=counts, primary=ti.primary_task_type,
                     pythonpath=tuple(pythonpath), cwd=str(run_dir), python=python,
                     timeout=ti.max_running_seconds, training_input=ti.to_dict())
    too_big = exec_problems(plan.argv, counts, plan.training_input, environ=os.environ)
    if too_big:  # would fail at exec with E2BIG ("Argument list too long") once the job ran
        raise JobSpecError(too_big)
    return plan, warnings


def _package_paths(ti, cwd: Path, problems: list[Problem]) -> tuple[list[str], Path]:
    """PYTHONPATH entries and the working directory (gcloud runs in the package's parent)."""
    paths: list[str] = []
    run_dir = cwd
    if ti.package_path:
        package = (cwd / ti.package_path).resolve()
        if not package.is_dir():
            problems.append(Problem("error", "trainingInput.packagePath", f"received {ti.package_path!r}, "
                                    f"which is not a directory (resolved to {package}). Point it at the trainer "
                                    "package."))
        elif ti.python_module and ti.python_module.split(".")[0] != package.name:
            problems.append(Problem("error", "trainingInput.pythonModule", f"received {ti.python_module!r}, "
                                    f"but packagePath is the package {package.name!r}; the module must be inside "
                                    f"it. Use pythonModule {package.name}.<module>."))
        else:
            _check_code_dirs("trainingInput.packagePath", [package.parent, package], problems)
        paths.append(str(package.parent))
        run_dir = package.parent
    for i, uri in enumerate(ti.package_uris):
        where = f"trainingInput.packageUris[{i}]"
        path = (cwd / uri).resolve()
        if _URI.match(uri):
            problems.append(Problem("error", where, f"received {uri!r}; the local backend has no network access "
                                    "to fetch packages. Set packagePath to a local directory, or use a local "
                                    ".whl, .zip or directory."))
        elif not path.exists():
            problems.append(Problem("error", where, f"received {uri!r}, which does not exist (resolved to {path})."))
        elif path.is_dir() or path.suffix in (".whl", ".zip"):
            _check_code_dirs(where, [path if path.is_dir() else path.parent], problems)
            paths.append(str(path))  # pure-Python wheels and zips import straight from the archive
        else:
            problems.append(Problem("error", where, f"received {uri!r}; a source archive must be installed "
                                    "first (pip install it) or its directory given as packagePath."))
    return paths, run_dir


def _check_code_dirs(where: str, dirs: list[Path], problems: list[Problem]) -> None:
    """Directories on the tasks' PYTHONPATH (and their working directory) that another user could plant a
    module in (``sitecustomize.py``, ``json.py``) are refused (``toolkit._owned``)."""
    for directory in dirs:
        try:
            check_code_dir(directory, what="the directory")
        except UnsafePathError as exc:
            problems.append(Problem("error", where, str(exc)))
            return


def _ignored_fields(spec: JobSpec, machines_given: bool) -> list[str]:
    ti = spec.training_input
    notes = []
    if ti.region:
        notes.append(f"region {ti.region!r} is recorded; the local backend runs on this machine.")
    machines = sorted({r.machine_type for r in ti.replicas().values() if r.machine_type})
    if machines and ti.scale_tier == "CUSTOM" and machines_given:
        notes.append(f"machine types ({', '.join(machines)}) are recorded; locally every task is a process "
                     "sharing this machine.")
    if any(r.accelerator_count for r in ti.replicas().values()) or ti.scale_tier == "BASIC_GPU" or any(
            (r.machine_type or "").endswith(("gpu", "p100", "v100")) for r in ti.replicas().values()):
        notes.append("GPUs are requested; the local backend uses whatever devices TensorFlow finds here.")
    if any(r.image_uri for r in ti.replicas().values()):
        notes.append("imageUri is recorded; the local backend runs this machine's Python environment.")
    installed = _installed_tf()
    if ti.runtime_version and installed and not installed.startswith(f"{ti.runtime_version}."):
        notes.append(f"runtimeVersion {ti.runtime_version} is requested; this environment has TensorFlow {installed}.")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if ti.python_version and ti.python_version != here:
        notes.append(f"pythonVersion {ti.python_version} is requested; the local backend runs Python {here}.")
    return notes


def _installed_tf() -> str | None:
    try:
        return version("tensorflow")
    except PackageNotFoundError:
        return None
