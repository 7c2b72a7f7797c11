"""CPU time per global step, by task: ``toolkit.fit`` under parameter servers against the TF1 peer.

Steps/s on a shared two-core machine scatter by +-30 % between runs of one setting. CPU time per
step scatters far less, and it says where a step's work goes. Each case runs twice, with a short
and a long run of the same shape (through ``bench_training.py``, fresh processes each time); every
process of the job is polled in ``/proc`` every 0.2 s for its CPU time (user + system), and the
difference between the two runs divided by the difference in global steps is the marginal CPU
time of one global step on each task: import, tracing and warm-up cancel out.

``cores x 1000 / (total ms per step)`` is the most steps/s the job could reach if nothing but
its own tasks used the cores; on a two-core machine running all four tasks it bounds both sides.

Usage:
    python benchmarks/bench_cpu_per_step.py [--cases toolkit/parameter_server/spe1 ... tf1_peer] [--peer PATH]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

from _proc import PolledRun, cpu_seconds, task_name  # noqa: E402
from bench_training import EPOCHS, _peer_path  # noqa: E402


def _role(pid: int) -> str | None:
    """The task a process is: tfdist's task name, or the TF1 peer's ``--child JOB INDEX``; None for helpers."""
    name = task_name(pid)
    if name is not None:
        return name
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return None
    if b"--child" in argv[:-2]:
        index = argv.index(b"--child")
        return f"{argv[index + 1].decode()}-{argv[index + 2].decode()}"
    return None


def cpu_by_task(cmd: list[str]) -> dict[str, float]:
    """Runs ``cmd``; returns each task's last-seen CPU seconds."""
    run = PolledRun(cmd, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, interval=0.2, name_of=_role)
    seen: dict[int, tuple[str, float]] = {}
    for tasks in run.samples():
        for pid, role in tasks.items():
            value = cpu_seconds(pid)
            if value is not None:
                seen[pid] = (role, value)
    if run.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}):\n{''.join(run.output[-20:])}")
    totals: dict[str, float] = collections.Counter()
    for role, value in seen.values():
        totals[role] += value
    return dict(totals)


def _case_cmd(case: str, steps_per_epoch: int) -> list[str]:
    return [sys.executable, str(_HERE / "bench_training.py"), "--only", case, "--steps", str(steps_per_epoch)]


def _peer_cmd(peer: Path, steps: int) -> list[str]:
    return [sys.executable, str(peer), "--workers", "2", "--steps", str(steps)]


def marginal(short: tuple[list[str], int], long: tuple[list[str], int]) -> dict[str, float]:
    """CPU milliseconds per global step on each task, from a short and a long run."""
    (cmd_a, steps_a), (cmd_b, steps_b) = short, long
    cpu_a, cpu_b = cpu_by_task(cmd_a), cpu_by_task(cmd_b)
    return {task: 1000 * (cpu_b.get(task, 0.0) - cpu_a.get(task, 0.0)) / (steps_b - steps_a)
            for task in sorted(set(cpu_a) | set(cpu_b))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", default=["toolkit/parameter_server/spe1",
                                                       "toolkit/parameter_server/spe32", "tf1_peer"],
                        help="bench_training.py cases, and tf1_peer for the TF1 between-graph peer")
    parser.add_argument("--steps", type=int, nargs=2, default=[320, 1600],
                        help=f"steps per epoch of the short and the long run ({EPOCHS} epochs each); keep both "
                             "multiples of the largest steps_per_execution, or the runs trace different "
                             "last executions and the difference is no longer the steps alone")
    parser.add_argument("--peer-steps", type=int, nargs=2, default=[4000, 12000])
    parser.add_argument("--peer", default=None, help="the TF1 between-graph peer script")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    runs: dict[str, dict[str, float]] = {}
    for case in args.cases:
        if case != "tf1_peer":
            short, long = ((_case_cmd(case, steps), EPOCHS * steps) for steps in args.steps)
            runs[case] = marginal(short, long)
            continue
        peer = _peer_path(args.peer)
        if peer is None or not peer.is_file():
            print("tf1_peer: peer script not found; skipped (pass --peer PATH)", file=sys.stderr)
            continue
        short, long = ((_peer_cmd(peer, steps), steps) for steps in args.peer_steps)
        runs[case] = marginal(short, long)
    print(f"CPU milliseconds per global step, by task ({cores} cores; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}):")
    for name, tasks in runs.items():
        total = sum(tasks.values())
        if total <= 0:
            print(f"  {name:34s} no task's CPU time grew with the steps; not measured")
            continue
        parts = ", ".join(f"{task} {ms:.2f}" for task, ms in tasks.items())
        print(f"  {name:34s} {total:6.2f} ms  ({parts}); at most {cores * 1000 / total:.0f} steps/s on "
              f"{cores} cores")


if __name__ == "__main__":
    main()
