"""The chaos benchmark's fast subset: three kinds of failure, each must end exactly right.

Runs ``benchmarks/chaos.py`` (a digits job under ``tfdist launch --preload``: 1 ps, 2
workers, a chief) three times, killing

* a worker mid-step (SIGKILL; the others carry on, and the launcher restarts
  it alone if the job is still running after its settle period),
* the chief while it writes a checkpoint (SIGKILL; the cluster restarts from
  the last checkpoint),
* the launcher itself mid-step (SIGKILL; every task must die with it, and a
  new launcher resumes the job).

Each run must complete with the exact final step in a readable checkpoint,
no hang and no orphan process.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_SCENARIOS = ("worker-kill-step", "chief-kill-checkpoint", "launcher-kill-step")


@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_three_chaos_scenarios_end_exactly_right(tmp_path, no_orphans):
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, str(_REPO / "benchmarks" / "chaos.py"), "--runs", "3", "--scenarios", ",".join(_SCENARIOS),
         "--seed", "0", "--no-baseline", "--no-evaluator", "--epochs", "1", "--steps-per-epoch", "80",
         "--checkpoint-every", "10", "--grace-period", "5", "--preload", "--json", str(out),
         "--keep", str(tmp_path / "runs")],
        cwd=_REPO, capture_output=True, text=True, timeout=900, check=False)
    report = json.loads(out.read_text())
    assert proc.returncode == 0 and report["target_met"], proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {run["scenario"]: run for run in report["runs"]}
    assert set(runs) == set(_SCENARIOS)
    for name, run in runs.items():
        assert run["kills"] and "(gone)" not in run["kills"][0], (name, run)  # the failure really happened
        assert (run["completed"], run["exact"], run["readable"], run["hung"], run["orphans"]) == (
            True, True, True, False, 0), (name, run)
        assert run["accuracy"] > 0.8, (name, run)
    # the cluster restarted and resumed from a checkpoint; so did the job under a new launcher
    logs = tmp_path / "runs"
    assert "restored" in (logs / "run-01-chief-kill-checkpoint" / "job" / "logs" / "chief-0.log").read_text()
    assert "restored" in (logs / "run-02-launcher-kill-step" / "job-resumed" / "logs" / "chief-0.log").read_text()
