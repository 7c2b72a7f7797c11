"""The launcher: a whole TensorFlow cluster from one call; here, on this machine.

``launch`` picks free loopback ports, writes each task's TF_CONFIG, starts every
task in parallel in its own process group, prefixes each output line with the
task's name (``[worker-1] ...``) and keeps a log per task. The job ends when the
chief ends; dead tasks are restarted according to the failure policy; nothing
is left running afterwards. ``tfdist launch`` is the same from the shell.

Example:
    >>> from toolkit.launcher import launch                         # doctest: +SKIP
    >>> result = launch(["python", "train.py"], workers=2, ps=1)  # doctest: +SKIP
    >>> result.exit_code, [t.name for t in result.tasks]  # doctest: +SKIP
    (0, ['ps-0', 'chief-0', 'worker-0', 'worker-1'])

What happens when a task dies is a ``FailurePolicy``: a pure function from a
``TaskExit`` to a ``Decision``. Every task's environment holds ``TF_CONFIG``
plus the ``ENV_*`` variables (its job and task directories, name and restart
count); the servers' timeouts reach every task through ``env=``
(``strategies.ServeOptions``). Tasks die with the launcher: if it is killed,
even by SIGKILL, the kernel kills them too (Linux).

The folder: what every engine's launcher shares (``_spec``, ``_policy``, ``_result``,
``_loop``, ``_task``, ``_console``, ``_dialect``, ``_lines``, ``_hooks``), and one
subpackage per engine: ``local/`` (processes here; ``launch`` is its entry point),
``ray/`` (``launch_ray``) and ``slurm/`` (``launch_slurm``). See docs/engines.md.
"""
from __future__ import annotations

import logging
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import IO, TYPE_CHECKING

from toolkit._owned import UnsafePathError, owned_dir
from toolkit.launcher._console import console_filter
from toolkit.launcher._dialect import DIALECTS, Dialect, cmle_dialect
from toolkit.launcher._loop import supervise
from toolkit.launcher._moved import __getattr__ as __getattr__  # the old paths of the modules now in local/
from toolkit.launcher._policy import Decision, FailurePolicy, Outcome, TaskExit
from toolkit.launcher._result import (
    EXIT_INTERRUPTED,
    EXIT_TASK_FAILED,
    EXIT_TIMEOUT,
    EventKind,
    LaunchResult,
    Reason,
    TaskEvent,
    TaskResult,
    TaskState,
)
from toolkit.launcher._spec import (
    ENV_JOB_DIR,
    ENV_RESTART_COUNT,
    ENV_TASK_DIR,
    ENV_TASK_NAME,
    LaunchError,
    LaunchFields,
    LaunchSpec,
    make_spec,
)
from toolkit.launcher._task import preemption_grace
from toolkit.launcher.local._isolation import ENV_ISOLATE, IsolationError, NetworkNamespace
from toolkit.launcher.local._isolation import resolve as resolve_isolation
from toolkit.launcher.local._supervisor import Job

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DIALECTS",
    "Decision",
    "Dialect",
    "ENV_ISOLATE",
    "ENV_JOB_DIR",
    "ENV_RESTART_COUNT",
    "ENV_TASK_DIR",
    "ENV_TASK_NAME",
    "EXIT_INTERRUPTED",
    "EXIT_TASK_FAILED",
    "EXIT_TIMEOUT",
    "EventKind",
    "FailurePolicy",
    "LaunchError",
    "LaunchFields",
    "LaunchResult",
    "LaunchSpec",
    "Outcome",
    "Reason",
    "TaskEvent",
    "TaskExit",
    "TaskResult",
    "TaskState",
    "cmle_dialect",
    "console_filter",
    "default_job_dir",
    "launch",
]

logger = logging.getLogger(__name__)


def default_job_dir() -> Path:
    """``runs/launch-<date>-<time>-<random>`` under the current directory."""
    return Path("runs") / f"launch-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def launch(cmd: Sequence[str] | LaunchSpec, *, job_dir: str | PathLike[str] | None = None,
           env: Mapping[str, str] | None = None, stream: IO[str] | None = None, echo: bool = True,
           on_task: Callable[[TaskEvent], None] | None = None, verbose: bool = False,
           isolate: bool | None = None, **spec_fields: Unpack[LaunchFields]) -> LaunchResult:
    """Runs a ``LaunchSpec`` (every task of a local cluster) and waits for the job to end.

    Example:
        >>> launch(["python", "train.py"], workers=2, ps=1)             # doctest: +SKIP
        >>> launch(LaunchSpec(cmd=("python", "train.py"), workers=2, dialect="cmle"))  # doctest: +SKIP

    Args:
        cmd: a ``LaunchSpec``, or the entrypoint (e.g. ``["python",
            "train.py"]``) with the spec's other fields as keywords
            (``workers=``, ``ps=``, ``max_restarts=``, ``dialect=``, ``cwd=``,
            ...; see ``LaunchSpec``).
        job_dir: the job's directory; default ``default_job_dir()``.
        env: extra environment variables for every task.
        stream: where prefixed task output goes; default ``sys.stdout``.
        echo: False keeps task output in the log files only.
        verbose: also echo TensorFlow's C++ start-up noise, otherwise kept off
            the console (``_console``); the log files always keep every line.
        isolate: run the whole cluster in a private network namespace, so no
            task port is reachable from another host or namespace (TensorFlow's
            servers listen on every interface). None: wherever the kernel
            allows unprivileged user namespaces (``TFDIST_ISOLATE=0`` turns the
            default off), with a warning where it does not; True: required.
        on_task: called with a ``TaskEvent`` each time a task starts (or
            restarts) and each time one exits, from the launching thread, so
            a caller can record pids, restarts and exit codes as they happen.
        **spec_fields: ``LaunchSpec`` fields, when ``cmd`` is the entrypoint.

    Returns:
        A ``LaunchResult``; ``exit_code`` is the chief's on a normal end.

    Raises:
        LaunchError: a bad argument, or ``isolate=True`` on a machine that
            cannot isolate (nothing was started).
        TypeError: a keyword that is no ``LaunchSpec`` field, or a
            ``LaunchSpec`` together with field keywords.
        tf_config.TFConfigError: the cluster shape cannot be generated.
    """
    spec = make_spec(cmd, dict(spec_fields))
    try:
        isolated = resolve_isolation(isolate)
    except IsolationError as exc:
        raise LaunchError(str(exc), field="isolate") from exc
    preemption_grace({**os.environ, **(env or {})})  # a value the tasks would refuse stops the job here
    directory = Path(job_dir if job_dir is not None else default_job_dir()).resolve()
    try:  # another user's directory (or one others can write) could redirect every file the job writes
        owned_dir(directory, what="the job directory (job_dir)", mode=0o777)
    except UnsafePathError as exc:
        raise LaunchError(str(exc), field="job_dir") from exc
    out = (stream if stream is not None else sys.stdout) if echo else None
    namespace = NetworkNamespace() if isolated else None
    try:
        try:
            job = Job(spec, directory, env=env, stream=out, on_task=on_task, verbose=verbose,
                      wrap=namespace.wrap if namespace is not None else None)
        except UnsafePathError as exc:
            raise LaunchError(str(exc), field="job_dir") from exc
        logger.info("launching %s in %s%s: %s", ", ".join(job.tasks), directory,
                    " (private network namespace)" if namespace else "", " ".join(spec.cmd))
        return supervise(job)
    finally:
        if namespace is not None:
            namespace.close()
