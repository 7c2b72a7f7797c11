"""What a local launch reports back."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Exit codes of a launch (besides the chief's own code).
EXIT_TASK_FAILED = 1      # a task other than the chief failed and could not be restarted
EXIT_TIMEOUT = 124        # the job ran past its timeout (as timeout(1) reports it)
EXIT_INTERRUPTED = 130    # SIGINT (Ctrl-C); SIGTERM gives 143 (128 + signal number)


@dataclass(frozen=True)
class TaskEvent:
    """A task started or ended: what ``launch(on_task=...)`` is told, as it happens.

    Attributes:
        name: ``chief-0``, ``worker-1``, ...
        kind: ``started`` or ``exited``.
        pid: the task's process id (also its process group id).
        restarts: how many times the task was started before this run.
        exit_code: the Popen return code once ``exited``; None when ``started``.
        log_path: the task's log file.
    """

    name: str
    kind: str
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
    """

    name: str
    task_type: str
    index: int
    exit_code: int | None
    restarts: int
    stopped: bool
    log_path: Path


@dataclass(frozen=True)
class LaunchResult:
    """The outcome of ``launch``.

    Attributes:
        exit_code: the job's exit code: the chief's (128 + N if a signal N
            killed it), 1 when another task failed for good, 124 on timeout,
            130/143 when interrupted by SIGINT/SIGTERM.
        reason: ``succeeded``, ``failed``, ``timeout`` or ``interrupted``.
        message: one line (plus a log tail on failure) saying what happened.
        tasks: every task, in start order.
        duration: seconds from launch to the last process gone.
        job_dir: the job's directory (``logs/``, ``tasks/``, ``cluster.json``).
        cluster_restarts: how many times the whole cluster was restarted.
    """

    exit_code: int
    reason: str
    message: str
    tasks: tuple[TaskResult, ...]
    duration: float
    job_dir: Path
    cluster_restarts: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def task(self, name: str) -> TaskResult:
        """The result of the task called ``name`` (e.g. ``"worker-1"``)."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"no task {name!r} in this job; tasks: {', '.join(t.name for t in self.tasks)}")
