"""What a local launch asks for, validated before any process starts.

The environment variables the launcher defines for every task are listed here
too, so that scripts and the training loop have one place to look them up.
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypedDict, cast

from tf_config.checks import check_int, check_number
from tf_config.errors import FieldError
from tf_config.limits import MAX_TASKS
from toolkit.launcher._dialect import DIALECTS, Dialect
from toolkit.launcher._result import SuccessPolicy
from toolkit.launcher.local._preload import command_problem, module_problem

# Environment variables set in every task (besides TF_CONFIG).
ENV_JOB_DIR = "TFDIST_JOB_DIR"            # the job's directory, shared by all tasks
ENV_TASK_DIR = "TFDIST_TASK_DIR"          # this task's own write dir: <job_dir>/tasks/<task>
ENV_TASK_NAME = "TFDIST_TASK_NAME"        # e.g. "worker-1"
ENV_RESTART_COUNT = "TFDIST_RESTART_COUNT"  # times this task was started before in this job
ENV_JOB_NONCE = "TFDIST_JOB_NONCE"        # random per job: keeps two jobs on the same ports apart
ENV_SIGNAL_DIR = "TFDIST_SIGNAL_DIR"      # the job's private signal directory (strategies._signals reads it)

_PYTHON_NAMES = ("python", "python3")


class LaunchError(FieldError):
    """A launch request that cannot work; ``field`` names the argument at fault."""


def _count(name: str, value: Any, *, minimum: int = 0) -> None:
    check_int(value, field=name, minimum=minimum, error=LaunchError)


def _seconds(name: str, value: Any, *, optional: bool) -> None:
    check_number(value, field=name, optional=optional, error=LaunchError, unit="seconds", example=60)


def resolve_dialect(dialect: str | Dialect) -> Dialect:
    """A dialect by name, or the ``Dialect`` given; an unknown name lists the known ones."""
    if isinstance(dialect, Dialect):
        return dialect
    found = DIALECTS.get(dialect) if isinstance(dialect, str) else None
    if found is None:
        raise LaunchError(f"`dialect` is {dialect!r}; expected one of {', '.join(map(repr, DIALECTS))} "
                          "or a toolkit.launcher.Dialect. Pass dialect='cmle' to name the chief master-0.",
                          field="dialect")
    return found


def _directory(cwd: Any) -> str | None:
    if cwd is None:
        return None
    if not isinstance(cwd, (str, os.PathLike)) or not os.path.isdir(cwd):
        raise LaunchError(f"`cwd` is {cwd!r}; expected an existing directory for the tasks to run in. "
                          "Pass cwd=None to run them in the launcher's own directory.", field="cwd")
    return os.path.abspath(cwd)


def resolve_command(cmd: Sequence[str]) -> tuple[str, ...]:
    """The command to run in each task; ``python`` means the launcher's own interpreter.

    A bare ``python`` on PATH is often not the interpreter that has TensorFlow
    (and tfdist) installed; the launcher's interpreter always is.
    """
    if isinstance(cmd, str) or not cmd or not all(isinstance(part, str) for part in cmd):
        raise LaunchError(
            f"`cmd` is {cmd!r}; expected the entrypoint as a list of strings, "
            'e.g. ["python", "train.py", "--epochs", "2"].', field="cmd"
        )
    program = sys.executable if cmd[0] in _PYTHON_NAMES else cmd[0]
    if shutil.which(program) is None:
        raise LaunchError(
            f"The entrypoint program {cmd[0]!r} was not found (received cmd={list(cmd)!r}). "
            "Give a path to an executable, or a command on PATH.", field="cmd"
        )
    return (program, *cmd[1:])


def resolve_preload(preload: Any, cmd: Sequence[str], cwd: str | None) -> tuple[str, ...]:
    """The modules to preload (a sequence, or one comma-separated string), checked with the command."""
    modules = [m for m in preload.split(",") if m.strip()] if isinstance(preload, str) else preload
    if not isinstance(modules, (list, tuple)):
        raise LaunchError(f"`preload` is {preload!r}; expected module names, e.g. ('tensorflow', 'keras') or "
                          "'tensorflow,keras'. Without `preload`, every task starts as a fresh interpreter.",
                          field="preload")
    modules = tuple(m.strip() if isinstance(m, str) else m for m in modules)
    problem = next((p for p in map(module_problem, modules) if p), None)
    if problem is None and modules:
        problem = command_problem(cmd, cwd)
    if problem:
        raise LaunchError(f"`preload` cannot be used: {problem}. Without `preload`, every task starts as a fresh "
                          "interpreter.", field="preload")
    return modules


@dataclass(frozen=True)
class LaunchSpec:
    """A validated launch request: what to run, the cluster's shape, and its failure policy.

    ``launch(spec)`` runs it; ``launch(cmd, workers=2, ps=1)`` builds one from keywords.

    Attributes:
        cmd: the entrypoint, run unchanged in every task, e.g.
            ``["python", "train.py", "--epochs", "2"]``. ``python`` means this
            interpreter.
        chief: chief tasks (0 or 1). Default: 1 when ``ps`` > 0 (TF2's
            ParameterServerStrategy needs it as its coordinator) or the
            dialect is ``cmle`` (its master), else 0 (worker 0 is the chief).
            ``chief=0`` with ``ps`` > 0 is TF1's between-graph layout (and
            Kubeflow's usual TFJob): ps and workers, worker 0 the chief; TF1
            graph scripts (``tf.train.replica_device_setter``) run on it,
            TF2's ParameterServerStrategy cannot.
        workers: worker tasks.
        ps: parameter-server tasks; any makes it a parameter-server job.
        evaluator: evaluator tasks (0 or 1); its failures never fail the job.
        timeout: seconds before the whole job is stopped (exit code 124).
        max_restarts: how many times a parameter-server worker may be
            restarted alone, and how many times the whole cluster may be.
        restartable: the entrypoint resumes from its last checkpoint when
            started again (it can read ``TFDIST_RESTART_COUNT``), so a ps
            death, a multi-worker-mirrored death or a failed chief restarts
            the whole cluster instead of failing the job.
        grace_period: seconds the other tasks get to exit by themselves after
            the chief ended, before they are stopped (a multi-worker-mirrored
            worker's shutdown is slow, slower under load).
        settle_period: seconds a failed non-chief task waits before the
            failure policy acts on it: servers told by a failing chief to
            exit non-zero leave just before the chief, and that is the
            chief's failure, not theirs.
        max_preemptions: how many preemptions (a task exiting with
            ``EXIT_PREEMPTED``, or killed by SIGTERM) the job is restarted
            after, apart from ``max_restarts`` (docs/preemption.md).
        dialect: ``"tf"`` (the chief is ``chief-0``), ``"cmle"`` (it is
            ``master-0``), ``"tfjob"`` (Kubeflow TFJob's TF_CONFIG) or a
            ``Dialect`` (``_dialect`` says what each one writes).
        cwd: the directory every task runs in (default: the launcher's).
        success_policy: ``"chief"`` (the default, TFJob's): the chief's exit 0
            is the job's success, and tasks that did not end cleanly are
            named in the result's message; ``"all-workers"`` (TFJob's
            ``AllWorkers``): the chief and every worker must exit 0 too,
            within ``grace_period`` after the chief.
        max_log_bytes: bytes of output each run of a task keeps in its log
            file (None: all); past it the output is still read and shown,
            and the task's result says how much was not kept.
        log_backups: with ``max_log_bytes``, rotate instead: a full log
            becomes ``<task>.log.1`` (``.1`` becomes ``.2``...) and a new one
            starts, keeping this many older files, so the newest output is
            kept (logrotate's ``rotate N``). 0: no rotation.
        preload: modules (e.g. ``("tensorflow", "keras")``) one process
            imports once, every task then being forked from it instead of
            starting a fresh interpreter; the command must be ``python SCRIPT
            ARGS`` or ``python -m MODULE ARGS`` (``toolkit.launcher.local._preload``).

    The failure fields (``max_restarts``, ``restartable``, ``settle_period``, ``max_preemptions``)
    become the job's ``FailurePolicy``.
    """

    cmd: tuple[str, ...]
    chief: int | None = None
    workers: int = 1
    ps: int = 0
    evaluator: int = 0
    timeout: float | None = None
    max_restarts: int = 0
    restartable: bool = False
    grace_period: float = 30.0
    settle_period: float = 10.0
    dialect: Dialect | str = "tf"
    cwd: str | os.PathLike[str] | None = None
    preload: tuple[str, ...] = ()
    max_preemptions: int = 3
    success_policy: SuccessPolicy | str = SuccessPolicy.CHIEF
    max_log_bytes: int | None = None
    log_backups: int = 0

    def __post_init__(self) -> None:
        if self.success_policy not in tuple(SuccessPolicy):
            raise LaunchError(f"`success_policy` is {self.success_policy!r}; expected one of "
                              f"{', '.join(repr(str(p)) for p in SuccessPolicy)}. Pass 'chief' (the default) or "
                              "'all-workers'.", field="success_policy")
        object.__setattr__(self, "success_policy", SuccessPolicy(self.success_policy))
        object.__setattr__(self, "cmd", resolve_command(self.cmd))
        object.__setattr__(self, "dialect", resolve_dialect(self.dialect))
        object.__setattr__(self, "cwd", _directory(self.cwd))
        object.__setattr__(self, "preload", resolve_preload(self.preload, self.cmd, cast(str | None, self.cwd)))
        if self.chief is None:  # PSS needs a coordinator, CMLE always has a master; else worker 0 is chief
            object.__setattr__(self, "chief", 1 if self.ps > 0 or self.tf_dialect.name == "cmle" else 0)
        assert self.chief is not None
        for name in ("chief", "workers", "ps", "evaluator", "max_restarts", "max_preemptions"):
            _count(name, getattr(self, name))
        for name in ("workers", "ps"):  # every task's TF_CONFIG lists every task: bounded, as a job spec is
            if getattr(self, name) > MAX_TASKS:
                raise LaunchError(f"`{name}` is {getattr(self, name):,}; expected at most {MAX_TASKS:,} tasks of a "
                                  f"kind. Run fewer, larger tasks: pass {name}={MAX_TASKS} or less.", field=name)
        if self.chief > 1 or self.evaluator > 1:
            field = "chief" if self.chief > 1 else "evaluator"
            raise LaunchError(f"`{field}` is {getattr(self, field)}; a cluster has at most one. Pass 0 or 1.",
                field=field)
        if self.chief + self.workers == 0:
            raise LaunchError("`workers` is 0 and `chief` is 0: nothing would train. Pass workers=1 or more.",
                field="workers")
        if self.tf_dialect.name == "cmle" and not self.chief:
            raise LaunchError(
                "`chief` is 0 with `dialect='cmle'`: a Cloud ML Engine job always runs a master (master-0), which "
                "CMLE scripts look for. Pass chief=1 (the default for cmle), or `dialect='tfjob'` (or 'tf') for "
                "a layout without a chief, where worker 0 is the chief.", field="chief")
        if self.max_log_bytes is not None:
            _count("max_log_bytes", self.max_log_bytes)
        _count("log_backups", self.log_backups)
        if self.log_backups and self.max_log_bytes is None:
            raise LaunchError(f"`log_backups` is {self.log_backups}, but `max_log_bytes` is not set: a log rotates "
                              "when it reaches `max_log_bytes`. Set `max_log_bytes` too, or leave `log_backups` at 0.",
                              field="log_backups")
        _seconds("timeout", self.timeout, optional=True)
        _seconds("grace_period", self.grace_period, optional=False)
        _seconds("settle_period", self.settle_period, optional=False)
        if not isinstance(self.restartable, bool):
            raise LaunchError(f"`restartable` is {self.restartable!r}; expected True or False.",
                              field="restartable")

    @property
    def tf_dialect(self) -> Dialect:
        """``dialect`` as the ``Dialect`` it was resolved to."""
        return resolve_dialect(self.dialect)

    @property
    def is_parameter_server(self) -> bool:
        """ps tasks make it a parameter-server job: workers are servers that can be restarted alone."""
        return self.ps > 0


class LaunchFields(TypedDict, total=False):
    """``LaunchSpec``'s fields besides ``cmd``, as ``launch``'s keywords (for type checkers)."""

    chief: int | None
    workers: int
    ps: int
    evaluator: int
    timeout: float | None
    max_restarts: int
    restartable: bool
    grace_period: float
    settle_period: float
    dialect: Dialect | str
    cwd: str | os.PathLike[str] | None
    preload: Sequence[str] | str
    max_preemptions: int
    success_policy: SuccessPolicy | str
    max_log_bytes: int | None
    log_backups: int


def make_spec(cmd: Sequence[str] | LaunchSpec, fields_given: dict[str, Any]) -> LaunchSpec:
    """``cmd`` when it is a ``LaunchSpec`` (no other fields allowed), else a new spec from the keywords."""
    if isinstance(cmd, LaunchSpec):
        if fields_given:
            raise TypeError(f"launch() got a LaunchSpec and also {', '.join(sorted(fields_given))}; pass either "
                            "a LaunchSpec or the command with keywords. Use dataclasses.replace(spec, ...) to change "
                            "a spec.")
        return cmd
    valid = {f.name for f in fields(LaunchSpec)} - {"cmd"}
    unknown = sorted(set(fields_given) - valid)
    if unknown:
        raise TypeError(f"launch() got unexpected keyword argument(s) {', '.join(unknown)}; the LaunchSpec fields "
                        f"are {', '.join(sorted(valid))}.")
    # A bare string is kept so that LaunchSpec refuses it with its own message.
    return LaunchSpec(cmd=cast(tuple[str, ...], cmd if isinstance(cmd, str) else tuple(cmd)), **fields_given)
