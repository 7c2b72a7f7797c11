"""A real tuning job: 4 trials of the digits model, 2 at a time, each a TensorFlow training job.

The trainer (tests/fixtures/jobs/trainer/digits_tune.py) trains with
``toolkit.fit``, whose validation summaries give ``val_accuracy`` without any
tuning code in the trainer.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from toolkit.cli import main
from toolkit.jobs import JobState, JobStore, api
from toolkit.jobs.engines.local._procs import is_alive
from toolkit.jobs.tuning import read_objective

pytestmark = pytest.mark.cluster
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


def test_digits_study_overlaps_trials_and_records_the_best(tmp_path, monkeypatch, capsys, no_orphans):
    home = tmp_path / "home"
    monkeypatch.setenv("TFDIST_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert main(["jobs", "submit", "training", "digits-hp", "--config", str(FIXTURES / "digits_tuning.yaml"),
                 "--package-path", str(FIXTURES / "trainer"), "--job-dir", "study"]) == 0
    deadline = time.monotonic() + 240
    while not (record := api.describe("digits-hp")).is_final and time.monotonic() < deadline:
        time.sleep(1)
    assert record.state is JobState.SUCCEEDED, record.error

    store = JobStore(home)
    trials = [store.get(name) for name in store.children("digits-hp")]
    assert [t.name for t in trials] == [f"digits-hp-trial-{n}" for n in range(1, 5)]
    assert all(t.state is JobState.SUCCEEDED for t in trials)
    overlapping = [(a.name, b.name) for i, a in enumerate(trials) for b in trials[i + 1:]
                   if a.started_at < b.ended_at and b.started_at < a.ended_at]
    assert ("digits-hp-trial-1", "digits-hp-trial-2") in overlapping  # 2 ran at once, really
    assert max(sum(t.started_at <= s.started_at < t.ended_at for t in trials) for s in trials) == 2  # never 3

    output = record.details["trainingOutput"]
    assert output["completedTrialCount"] == 4
    for doc in output["trials"]:
        trial_dir = tmp_path / "study" / doc["trialId"]
        value, step = read_objective(trial_dir, "val_accuracy", goal="MAXIMIZE")
        assert doc["finalMetric"] == {"trainingStep": step, "objectiveValue": pytest.approx(value)}
        assert step == 30 and 0.0 < value <= 1.0  # 2 epochs of 15 steps; evaluated at each epoch end
        assert (trial_dir / "validation").is_dir() and (trial_dir / "train").is_dir()
        assert 0.0005 <= doc["hyperparameters"]["learning_rate"] <= 0.05
        assert doc["hyperparameters"]["hidden_units"] in (16, 32, 64)
    best = output["bestTrial"]
    assert best["finalMetric"]["objectiveValue"] == max(t["finalMetric"]["objectiveValue"] for t in output["trials"])

    capsys.readouterr()
    assert main(["jobs", "describe", "digits-hp"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and line.split()[0].isdigit()]
    assert [r[0] for r in rows] == [t["trialId"] for t in output["trials"]] and len(rows) == 4
    objectives = [float(r[2]) for r in rows]
    assert objectives == sorted(objectives, reverse=True)
    assert f"bestTrial: {best['trialId']} " in out
    assert (tmp_path / "study" / "trials.png").stat().st_size > 1000
    pids = [store.supervisor("digits-hp").pid] + [p for t in trials for _, p, _ in store.task_processes(t.name)]
    deadline = time.monotonic() + 30
    while any(is_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(is_alive(p) for p in pids)
