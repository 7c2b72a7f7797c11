"""What a local launch reports back: results, events, and the enums they carry.

The enums are ``str`` subclasses whose values are the words the launcher has
always reported (``result.reason == "failed"`` keeps working), so a caller can
compare with the enum or with its text.
"""
from __future__ import annotations

import enum
import signal
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EXIT_INTERRUPTED", "EXIT_PREEMPTED", "EXIT_TASK_FAILED", "EXIT_TIMEOUT", "EventKind", "LaunchResult",
           "Reason", "SuccessPolicy", "TaskEvent", "TaskResult", "TaskState", "is_preemption", "task_end"]

# Exit codes of a launch (besides the chief's own code).
EXIT_TASK_FAILED = 1      # a task other than the chief failed and could not be restarted
EXIT_TIMEOUT = 124        # the job ran past its timeout (as timeout(1) reports it)
EXIT_INTERRUPTED = 130    # SIGINT (Ctrl-C); SIGTERM gives 143 (128 + signal number)
#: A task (or a launch) that was preempted: it got SIGTERM (or the configured signal), and its job wrote a
#: checkpoint at the step it had reached before exiting. 128 + SIGTERM, as a shell, Kubernetes and Slurm already
#: read it; Kubernetes' ``ExitCode`` restart policy retries codes 128-255.
EXIT_PREEMPTED = 143


def is_preemption(exit_code: int | None) -> bool:
    """Whether a task's Popen return code means "preempted": ``EXIT_PREEMPTED``, or killed by SIGTERM itself
    (a task that had not installed its handler yet, e.g. while importing TensorFlow)."""
    return exit_code in (EXIT_PREEMPTED, -15)


class _Words(str, enum.Enum):
    """An enum whose ``str()`` and ``format()`` are its value, as on Python 3.11's ``StrEnum``."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Reason(_Words):
    """Why a launch ended (``LaunchResult.reason``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    PREEMPTED = "preempted"  # a task was preempted and the job could not restart (no budget, not restartable)


class SuccessPolicy(_Words):
    """When a job whose chief exited 0 has succeeded (Kubeflow TFJob's ``successPolicy``).

    ``CHIEF`` (TFJob's default): the chief's exit 0 is the job's success; a task that did not end cleanly is
    named in the result's message. ``ALL_WORKERS`` (TFJob's ``AllWorkers``): the chief and every worker must
    exit 0 (the workers get ``grace_period`` seconds after the chief to do so); ps and evaluator tasks do not
    count.
    """

    CHIEF = "chief"
    ALL_WORKERS = "all-workers"


def task_end(exit_code: int | None, stopped: bool) -> str:
    """How a task ended, in words: ``exited with code 0``, ``exited with code 1``, ``was stopped by the launcher
    (signal SIGTERM (-15))``, ``was killed by signal SIGKILL (-9)``, ``had not ended``."""
    if exit_code is None:
        return "had not ended"
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    try:
        name = f"signal {signal.Signals(-exit_code).name} ({exit_code})"
    except ValueError:
        name = f"signal {-exit_code} ({exit_code})"
    return f"was stopped by the launcher ({name})" if stopped else f"was killed by {name}"


class EventKind(_Words):
    """What happened to a task (``TaskEvent.kind``)."""

    STARTED = "started"
    EXITED = "exited"


class TaskState(_Words):
    """Where a task is: RUNNING, then EXITED once its process ended, and one of SUCCEEDED, FAILED
    (a non-zero exit the launcher did not cause) or STOPPED (the launcher signalled it) at the job's end.
    The jobs backends record these in their store."""

    RUNNING = "RUNNING"
    EXITED = "EXITED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


@dataclass(frozen=True)
class TaskEvent:
    """A task started or ended: what ``launch(on_task=...)`` is told, as it happens.

    Attributes:
        name: ``chief-0``, ``worker-1``, ...
        kind: ``EventKind.STARTED`` or ``EventKind.EXITED``.
        pid: the task's process id (also its process group id).
        restarts: how many times the task was started before this run.
        exit_code: the Popen return code once ``exited``; None when ``started``.
        log_path: the task's log file.
    """

    name: str
    kind: EventKind
    pid: int
    restarts: int
    exit_code: int | None
    log_path: Path


@dataclass(frozen=True)
class TaskResult:
    """One task of the job.

    Attributes:
        name: ``chief-0``, ``worker-1``, ``ps-0``, ``evaluator-0``.
        exit_code: the last run's Popen return code (negative: killed by that signal).
        restarts: how many times the launcher restarted it (alone or with the cluster).
        stopped: the launcher had to signal it at the end (it did not exit by itself).
        log_path: its log file; every run of the task is appended to it.
        preemptions: how many of its runs ended preempted (``is_preemption``).
        log_problem: its log could not keep all its output (a full disk, the log cap), or None.
    """

    name: str
    task_type: str
    index: int
    exit_code: int | None
    restarts: int
    stopped: bool
    log_path: Path
    preemptions: int = 0
    log_problem: str | None = None

    @property
    def state(self) -> TaskState:
        """SUCCEEDED (exit code 0), STOPPED (the launcher signalled it) or FAILED."""
        if self.exit_code == 0:
            return TaskState.SUCCEEDED
        return TaskState.STOPPED if self.stopped else TaskState.FAILED

    @property
    def end(self) -> str:
        """How it ended, in words (``task_end``): ``exited with code 0``, ``was killed by signal SIGKILL (-9)``..."""
        return task_end(self.exit_code, self.stopped)


@dataclass(frozen=True)
class LaunchResult:
    """The outcome of ``launch``.

    Attributes:
        exit_code: the job's exit code: the chief's (128 + N if a signal N
            killed it), 1 when another task failed for good, 124 on timeout,
            130/143 when interrupted by SIGINT/SIGTERM, ``EXIT_PREEMPTED`` (143) when
            a task was preempted and the job could not restart.
        reason: a ``Reason``: ``succeeded``, ``failed``, ``timeout``, ``interrupted`` or ``preempted``.
        message: one line (plus a log tail on failure) saying what happened.
        tasks: every task, in start order.
        duration: seconds from launch to the last process gone.
        job_dir: the job's directory (``logs/``, ``tasks/``, ``cluster.json``).
        cluster_restarts: how many times the whole cluster was restarted.
        preemptions: how many preemptions the launcher acted on (restarts on the
            ``max_preemptions`` budget, or the job's end as preempted).
        failures: how many failures it acted on (restarts on the
            ``max_restarts`` budget, or the job's end as failed).
    """

    exit_code: int
    reason: Reason
    message: str
    tasks: tuple[TaskResult, ...]
    duration: float
    job_dir: Path
    cluster_restarts: int
    preemptions: int = 0
    failures: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def unclean(self) -> tuple[TaskResult, ...]:
        """The tasks that did not exit 0 (a job can succeed under the chief's policy with some)."""
        return tuple(task for task in self.tasks if task.exit_code != 0)

    def task(self, name: str) -> TaskResult:
        """The result of the task called ``name`` (e.g. ``"worker-1"``)."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"no task {name!r} in this job; tasks: {', '.join(t.name for t in self.tasks)}")
