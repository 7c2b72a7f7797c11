"""The chaos benchmark's reading of a preempted job's logs: steps redone, exit codes, how the restart counted."""
from __future__ import annotations

import re
from pathlib import Path

from _chaos_scenarios import RunResult

__all__ = ["check_preemption"]

# the chief's "preempted (<why>): checkpoint at step N written in S s; exiting with 143", and its
# "worker-0 preempted (<its notice>): checkpoint at step N written in S s; training goes on without it ..."
_SAVED = r"preempted \([^)]*\): (?:checkpoint at step (\d+) written|step (\d+) is checkpointed already)[^\n]*"
_STOPPED_AT = re.compile(_SAVED + "; exiting with")
_GOES_ON = re.compile(_SAVED + "; training goes on without it")
# the Estimator's chief: "preempted (<why>): chief-0 stopped after the step in flight; newest checkpoint <path>"
_STOPPED_GRAPH = re.compile(r"preempted \([^)]*\): \S+ stopped after the step in flight; "
                            r"newest checkpoint \S*ckpt-(\d+)")
_RESTORED = re.compile(r"restored (?:the backup )?\S+ at global step (\d+)|Restoring parameters from \S*ckpt-(\d+)")
_FINAL_CODE = re.compile(r"[ ,:]([a-z]+-\d+)=(-?\d+)")
_COUNTED = re.compile(r"\S+ was preempted \((?:code (\d+)|signal \w+ \((-?\d+)\))\)")


def check_preemption(job_dir: Path, result: RunResult, target: str, job: str) -> None:
    """Steps redone, exit codes and how the launcher counted the restart, from the job's logs.

    The job stopped at the step of its preemption checkpoint (``_STOPPED_AT`` in the chief's log), or
    went on without the task (``_GOES_ON``: nothing to redo); the restarted run resumed from the step
    ``_RESTORED`` names. Signal-to-checkpoint time is the harness's time from the SIGTERM to that
    checkpoint's index file (``recover_seconds``), or 0 when the step the job stopped at was
    checkpointed before the signal.
    """
    logs = sorted((job_dir / "logs").glob("chief-*.log")) or sorted((job_dir / "logs").glob("worker-0*.log"))
    chief = "\n".join(p.read_text(errors="replace") for p in logs)
    stops = sorted([(m.start(), int(m[1] or m[2])) for m in _STOPPED_AT.finditer(chief)]
                   + [(m.start(), int(m[1])) for m in _STOPPED_GRAPH.finditer(chief)])
    stopped = [step for _, step in stops]
    # the restart's restore comes after the stop (an Estimator's predict() at the end restores too)
    restored = [int(m[1] or m[2]) for m in _RESTORED.finditer(chief) if not stops or m.start() > stops[0][0]][:1]
    went_on = [int(written or already) for written, already in _GOES_ON.findall(chief)]
    if stopped and restored:
        result.steps_redone = stopped[0] - restored[0]
    elif went_on:
        result.steps_redone = 0
    elif job == "estimator" and target.startswith("worker") and not stopped \
            and _RESTORED.search(chief[:chief.rfind(" local steps")]) is None:  # (predict() restores after it)
        result.steps_redone = 0  # the chief never stopped or restored: the worker's steps are in the ps variables
    saved_at = (stopped or went_on or [None])[0]
    before = int(result.kills[0].rsplit("@ckpt-", 1)[1])
    if saved_at is not None and saved_at <= before:
        result.signal_to_checkpoint = 0.0  # the step it stopped at was saved before the signal
    elif saved_at is not None and result.recover_seconds:  # the evaluator's preemption causes none
        result.signal_to_checkpoint = result.recover_seconds[0]
    launcher = (job_dir.parent / f"{job_dir.name}-launcher.log").read_text(errors="replace")
    result.exit_codes = [int(code or killed) for code, killed in _COUNTED.findall(launcher)]
    result.counted = ("failure" if re.search(r"exited with [^;\n]*; restarting", launcher)
                      else "preemption" if result.exit_codes else "")
    final = dict(_FINAL_CODE.findall(launcher))  # the summary's ``tasks: worker-0=143, ...``
    if not result.exit_codes and final.get(target, "").isdigit():
        # the job ended before the launcher saw the task leave (nothing left to restart it for)
        result.exit_codes, result.counted = [int(final[target])], "at the end"
