"""The launcher's failure policy as data: a task's exit in, a ``Decision`` out.

``FailurePolicy.decide`` is a pure function of a ``TaskExit`` (which task, its
exit code, how long ago, how many restarts so far), so the whole policy can be
read, and tested, as a table; the control loop (``_supervisor``) only carries
the decisions out. This is Ray Train's ``FailurePolicy``/``FailureDecision``
split.

Example:
    >>> policy = FailurePolicy(max_restarts=2, parameter_server=True)
    >>> policy.decide(TaskExit(task_type="worker", is_chief=False, exit_code=-9, seconds_since_exit=30.0))
    <Decision.RESTART_TASK: 'restart_task'>
    >>> policy.decide(TaskExit(task_type="chief", is_chief=True, exit_code=0))
    <Decision.FINISH: 'finish'>

A preempted task (``EXIT_PREEMPTED``, or killed by SIGTERM before it could
handle it) is decided on a separate budget, ``max_preemptions``, counted over
the whole job: a preemption is the machine being taken away, not a fault of
the program, so it never spends ``max_restarts``.

    >>> policy.decide(TaskExit(task_type="worker", is_chief=False, exit_code=143, seconds_since_exit=30.0,
    ...                        task_restarts=2))
    <Decision.RESTART_TASK: 'restart_task'>
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from toolkit.launcher._result import EXIT_TASK_FAILED, Reason, SuccessPolicy, is_preemption, task_end
from toolkit.launcher._spec import LaunchError, LaunchSpec, _count, _seconds

__all__ = ["Decision", "FailurePolicy", "Outcome", "TaskEnd", "TaskExit", "judge_success"]


class Decision(str, enum.Enum):
    """What the launcher does about one task's ended."""

    FINISH = "finish"                    # the chief succeeded: the job is over
    IGNORE = "ignore"                    # nothing to do (a non-chief task ended well, or the evaluator)
    WAIT = "wait"                        # a failed non-chief task within settle_period: the chief may end the job
    RESTART_TASK = "restart_task"        # a parameter-server worker: restart it alone, same TF_CONFIG
    RESTART_CLUSTER = "restart_cluster"  # restart every task on fresh ports (the entrypoint resumes)
    FAIL_JOB = "fail_job"                # the job cannot recover
    PREEMPTED = "preempted"              # preempted, and no preemption restart left: end the job as preempted


@dataclass(frozen=True)
class TaskExit:
    """One task's exit, as the policy sees it.

    Attributes:
        task_type: ``chief``/``master``, ``worker``, ``ps`` or ``evaluator``.
        is_chief: the task whose end is the job's end.
        exit_code: its Popen return code (negative: killed by that signal).
        seconds_since_exit: how long ago it exited.
        task_restarts: how many times this task was restarted alone after a failure so far.
        cluster_restarts: how many times the whole cluster was restarted after a failure so far.
        preemptions: how many preemptions of the job's tasks were acted on so far (restarts of a
            task or of the cluster on the ``max_preemptions`` budget).
    """

    task_type: str
    is_chief: bool
    exit_code: int
    seconds_since_exit: float = 0.0
    task_restarts: int = 0
    cluster_restarts: int = 0
    preemptions: int = 0

    @property
    def preempted(self) -> bool:
        """The task was preempted (``toolkit.launcher.is_preemption``), rather than failed."""
        return is_preemption(self.exit_code)


@dataclass(frozen=True)
class Outcome:
    """How a job ended: the launch's exit code, a ``Reason`` and a one-line (plus log tail) message."""

    exit_code: int
    reason: Reason
    message: str


@dataclass(frozen=True)
class FailurePolicy:
    """When a launch restarts a task, restarts the cluster, waits, or fails.

    Attributes:
        max_restarts, restartable, settle_period: as ``LaunchSpec``'s.
        parameter_server: the job has ps tasks, so its workers are servers
            that can be restarted alone.
        max_preemptions: how many preemptions the job may be restarted after
            (a ps worker or the evaluator alone, any other task with the whole
            cluster, which needs ``restartable``), over the whole job. Past it, or
            when the cluster cannot restart, the job ends as preempted
            (``EXIT_PREEMPTED``) so the engine above it can start it again.
    """

    max_restarts: int = 0
    restartable: bool = False
    settle_period: float = 10.0
    parameter_server: bool = False
    max_preemptions: int = 3

    def __post_init__(self) -> None:
        _count("max_restarts", self.max_restarts)
        _count("max_preemptions", self.max_preemptions)
        _seconds("settle_period", self.settle_period, optional=False)
        for name in ("restartable", "parameter_server"):
            if not isinstance(getattr(self, name), bool):
                raise LaunchError(f"`{name}` is {getattr(self, name)!r}; expected True or False.", field=name)

    @classmethod
    def of(cls, spec: LaunchSpec) -> FailurePolicy:
        """The policy a validated ``LaunchSpec`` asks for."""
        return cls(max_restarts=spec.max_restarts, restartable=spec.restartable, settle_period=spec.settle_period,
                   parameter_server=spec.is_parameter_server,
                   max_preemptions=spec.max_preemptions)

    def decide(self, ended: TaskExit) -> Decision:
        """The decision for ``ended``; see the module docstring."""
        if ended.preempted:
            return self._decide_preempted(ended)
        if ended.is_chief:
            if ended.exit_code == 0:
                return Decision.FINISH
            return Decision.RESTART_CLUSTER if self._cluster_can_restart(ended) else Decision.FAIL_JOB
        if ended.exit_code == 0 or ended.task_type == "evaluator":
            return Decision.IGNORE
        if ended.seconds_since_exit < self.settle_period:
            return Decision.WAIT
        if self.parameter_server and ended.task_type == "worker":
            return Decision.RESTART_TASK if ended.task_restarts < self.max_restarts else Decision.FAIL_JOB
        return Decision.RESTART_CLUSTER if self._cluster_can_restart(ended) else Decision.FAIL_JOB

    def _decide_preempted(self, ended: TaskExit) -> Decision:
        """A preemption: restart what it took on the ``max_preemptions`` budget, else end the job as preempted."""
        if not ended.is_chief and ended.seconds_since_exit < self.settle_period:
            return Decision.WAIT  # a preempted chief tells its servers to exit with the same code, just before it
        budget = ended.preemptions < self.max_preemptions
        alone = not ended.is_chief and (ended.task_type == "evaluator"
                                        or (self.parameter_server and ended.task_type == "worker"))
        if alone:
            return Decision.RESTART_TASK if budget else Decision.PREEMPTED
        return Decision.RESTART_CLUSTER if budget and self.restartable else Decision.PREEMPTED

    def explain(self, ended: TaskExit) -> str:
        """Why ``ended`` fails the job (for ``FAIL_JOB``, ``PREEMPTED``), as the end of "worker-1 exited with code 3
        and ..."."""
        if ended.preempted:
            why = (f"the job was already restarted after {ended.preemptions} preemption(s) "
                   f"(max_preemptions={self.max_preemptions})" if ended.preemptions >= self.max_preemptions
                   else "the entrypoint is not restartable")
            return f"was preempted; the job ends as preempted ({why})"
        if not ended.is_chief and self.parameter_server and ended.task_type == "worker":
            return f"could not be restarted (max_restarts={self.max_restarts})"
        why = ("the entrypoint is not restartable" if not self.restartable
               else f"the cluster was already restarted {ended.cluster_restarts} time(s)")
        return f"the job cannot recover ({why})"

    def _cluster_can_restart(self, ended: TaskExit) -> bool:
        return self.restartable and ended.cluster_restarts < self.max_restarts


@dataclass(frozen=True)
class TaskEnd:
    """How one task ended, as ``judge_success`` reads it."""

    name: str
    task_type: str
    exit_code: int | None
    stopped: bool


def judge_success(outcome: Outcome, ends: list[TaskEnd], policy: SuccessPolicy | str) -> Outcome:
    """A succeeded ``outcome`` with the tasks that did not exit 0 named in its message; under
    ``SuccessPolicy.ALL_WORKERS`` a failure (``EXIT_TASK_FAILED``) if one of them is the chief or a worker.
    Any other outcome is returned as it is.

        >>> ok = Outcome(0, Reason.SUCCEEDED, "the chief (worker-0) exited with code 0")
        >>> judge_success(ok, [TaskEnd("ps-0", "ps", 1, False)], "chief").message
        'the chief (worker-0) exited with code 0; not every task ended cleanly: ps-0 exited with code 1'
    """
    unclean = [end for end in ends if end.exit_code != 0]
    if outcome.reason is not Reason.SUCCEEDED or not unclean:
        return outcome
    words = ", ".join(f"{end.name} {task_end(end.exit_code, end.stopped)}" for end in unclean)
    if SuccessPolicy(policy) is SuccessPolicy.ALL_WORKERS and any(
            end.task_type in ("chief", "master", "worker") for end in unclean):
        return Outcome(EXIT_TASK_FAILED, Reason.FAILED, f"{outcome.message}, but {words}; the success policy "
                                                       "all-workers needs the chief and every worker to exit 0")
    return Outcome(0, Reason.SUCCEEDED, f"{outcome.message}; not every task ended cleanly: {words}")
