"""The chaos benchmark's report: one row per scenario, the preemption figures, and the verdict."""
from __future__ import annotations

from typing import Any

from _chaos_scenarios import PREEMPTION_SCENARIOS, RunResult, job_of

__all__ = ["fmt", "met_target", "preemption_table", "summarize", "table"]


def summarize(results: list[RunResult], baselines: dict[str, float | None]) -> list[dict[str, Any]]:
    """One row per scenario; accuracy deltas against the undisturbed run of the scenario's front door."""
    rows = []
    for name in dict.fromkeys(r.scenario for r in results):
        runs = [r for r in results if r.scenario == name]
        completed = [r for r in runs if r.completed]
        baseline = baselines.get(job_of(name))
        deltas = [r.accuracy - baseline for r in completed if r.accuracy is not None and baseline is not None]
        recover = [s for r in runs for s in r.recover_seconds]
        rows.append({
            "scenario": name, "runs": len(runs), "completed": len(completed),
            "hung": sum(r.hung for r in runs), "exact": sum(r.exact for r in completed),
            "readable": sum(r.readable for r in runs),
            "worst_accuracy_delta": max(deltas, key=abs, default=None),
            "orphans": sum(r.orphans for r in runs),
            "recover_s_max": max(recover, default=None),
            "recover_s_mean": sum(recover) / len(recover) if recover else None,
        })
    return rows


def fmt(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    header = (f"{'scenario':<24} {'runs':>4} {'completed':>9} {'hung':>4} {'exact':>5} {'readable':>8} "
              f"{'acc delta':>9} {'orphans':>7} {'recover s (mean/max)':>20}")
    lines = [header, "-" * len(header)]
    for r in rows:
        recover = f"{fmt(r['recover_s_mean'], '.1f')}/{fmt(r['recover_s_max'], '.1f')}"
        lines.append(f"{r['scenario']:<24} {r['runs']:>4} {r['completed']:>9} {r['hung']:>4} {r['exact']:>5} "
                     f"{r['readable']:>8} {fmt(r['worst_accuracy_delta'], '+.3f'):>9} {r['orphans']:>7} "
                     f"{recover:>20}")
    return "\n".join(lines)


def preemption_table(results: list[RunResult]) -> str:
    """Per preemption scenario: steps redone, signal-to-checkpoint time, exit codes, how the restart was counted."""
    header = (f"{'scenario':<24} {'runs':>4} {'redone max':>10} {'sig->ckpt s (mean/max)':>22} "
              f"{'exit codes':>12} {'counted':>12}")
    lines = [header, "-" * len(header)]
    for name in dict.fromkeys(r.scenario for r in results if r.scenario in PREEMPTION_SCENARIOS):
        runs = [r for r in results if r.scenario == name]
        redone = [r.steps_redone for r in runs if r.steps_redone is not None]
        times = [r.signal_to_checkpoint for r in runs if r.signal_to_checkpoint is not None]
        codes = sorted({c for r in runs for c in r.exit_codes})
        counted = sorted({r.counted or "-" for r in runs})
        mean = sum(times) / len(times) if times else None
        lines.append(f"{name:<24} {len(runs):>4} {fmt(max(redone, default=None)):>10} "
                     f"{fmt(mean, '.1f') + '/' + fmt(max(times, default=None), '.1f'):>22} "
                     f"{','.join(map(str, codes)) or '-':>12} {','.join(counted):>12}")
    return "\n".join(lines)


def met_target(results: list[RunResult], baselines: dict[str, float | None]) -> bool:
    for r in results:
        baseline = baselines.get(job_of(r.scenario))
        if r.steps_redone is not None and r.steps_redone > 0:
            return False
        if r.scenario in PREEMPTION_SCENARIOS and r.counted == "failure":
            return False
        if r.hung or r.orphans or not r.readable:
            return False
        if r.completed and (not r.exact or (baseline is not None and r.accuracy is not None
                                             and abs(r.accuracy - baseline) > 0.02)):
            return False
    return True
