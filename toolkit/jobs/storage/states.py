"""The job lifecycle, as on CMLE: QUEUED -> PREPARING -> RUNNING -> an end state.

Every state change goes through ``check_transition`` so that two writers racing
(a ``cancel`` and a supervisor finishing) cannot produce an impossible history
such as CANCELLED -> SUCCEEDED: the loser gets ``JobStateError`` and re-reads.

    QUEUED ──> PREPARING ──> RUNNING ──> SUCCEEDED
       │           │            │──────> FAILED
       └───────────┴────────────┴──> CANCELLING ──> CANCELLED
    (any live state can also end FAILED, e.g. when its supervisor dies; a CANCELLING job
    whose every task had already exited 0 ends SUCCEEDED: a cancel never rewrites a finished job)
"""
from __future__ import annotations

import enum

from toolkit.jobs.errors import JobStateError

__all__ = ["JobState", "TRANSITIONS", "FINAL_STATES", "LIVE_STATES", "check_transition", "advance_path"]


class JobState(str, enum.Enum):
    QUEUED = "QUEUED"
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


_S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.QUEUED: frozenset({_S.PREPARING, _S.CANCELLING, _S.FAILED}),
    _S.PREPARING: frozenset({_S.RUNNING, _S.CANCELLING, _S.FAILED}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLING}),
    _S.CANCELLING: frozenset({_S.CANCELLED, _S.FAILED, _S.SUCCEEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}
FINAL_STATES = frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED})
LIVE_STATES = frozenset(set(JobState) - FINAL_STATES)


def check_transition(job: str, current: JobState | str, new: JobState | str) -> JobState:
    """Returns ``new`` as a JobState if ``current -> new`` is allowed, else raises JobStateError."""
    current, new = JobState(current), JobState(new)
    allowed = TRANSITIONS[current]
    if new not in allowed:
        if current.is_final:
            raise JobStateError(f"job {job!r} already ended {current}; it cannot become {new}.")
        valid = ", ".join(sorted(s.value for s in allowed))
        raise JobStateError(f"job {job!r} is {current}; it can become {valid}, not {new}.")
    return new


def advance_path(current: JobState | str, target: JobState | str) -> list[JobState]:
    """The shortest list of legal steps from ``current`` to ``target`` (empty if none or equal).

    A backend that only observes states (``kubectl get tfjob``) may see a job jump
    from QUEUED to RUNNING; replaying the steps keeps the recorded history legal.
    """
    current, target = JobState(current), JobState(target)
    paths: dict[JobState, list[JobState]] = {current: []}
    frontier = [current]
    while frontier and target not in paths:
        nxt = []
        for state in frontier:
            for step in sorted(TRANSITIONS[state], key=lambda s: s.value):
                if step is _S.CANCELLING and target is not _S.CANCELLED and target is not step:
                    continue  # only a cancel passes through CANCELLING (its SUCCEEDED is a race, not a path)
                if step not in paths:
                    paths[step] = paths[state] + [step]
                    nxt.append(step)
        frontier = nxt
    return paths.get(target, []) if target is not current else []
