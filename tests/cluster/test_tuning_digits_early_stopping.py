"""A real study with early stopping: 2 digits trials (TensorFlow) one after the other, the second hopeless.

Trial 1 runs to its end (the median pruner waits for one finished trial). Trial
2 trains with a learning rate of 0, falls behind trial 1's val_accuracy at the
same steps and is stopped once it has 2 measurements: its process exits, its
last checkpoint stays, and the study counts it as finished. (One study of two
trials keeps the test's cost to two TensorFlow start-ups.)
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from toolkit.cli import main
from toolkit.jobs import JobState, JobStore, api
from toolkit.jobs.engines.local._procs import is_alive

pytestmark = pytest.mark.cluster
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


def test_a_hopeless_digits_trial_is_stopped_early(tmp_path, monkeypatch, capsys, no_orphans):
    home = tmp_path / "home"
    monkeypatch.setenv("TFDIST_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    doc = yaml.safe_load((FIXTURES / "digits_tuning.yaml").read_text())
    doc["trainingInput"]["pythonModule"] = "trainer.digits_curve"
    doc["trainingInput"]["hyperparameters"].update(
        maxTrials=2, maxParallelTrials=1, maxFailedTrials=0, enableTrialEarlyStopping=True,
        earlyStopping={"minMeasurements": 2, "startupTrials": 1},
        params=[{"parameterName": "learning_rate", "type": "DOUBLE", "minValue": 0.01, "maxValue": 0.05}])
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    assert main(["jobs", "submit", "training", "stop-hp", "--config", "job.yaml", "--package-path",
                 str(FIXTURES / "trainer"), "--job-dir", "study", "--", "--epochs", "5", "--epoch-seconds",
                 "0.5", "--hopeless-trial", "2"]) == 0
    deadline = time.monotonic() + 240
    while not (record := api.describe("stop-hp")).is_final and time.monotonic() < deadline:
        time.sleep(1)
    assert record.state is JobState.SUCCEEDED, record.error

    output = record.details["trainingOutput"]
    trials = {t["trialId"]: t for t in output["trials"]}
    assert output["completedTrialCount"] == 2 and output["failedTrialCount"] == 0
    assert trials["1"]["isTrialStoppedEarly"] is False
    assert [m["trainingStep"] for m in trials["1"]["allMetrics"]] == [10, 20, 30, 40, 50]
    hopeless = trials["2"]
    assert hopeless["isTrialStoppedEarly"] is True and hopeless["state"] == "SUCCEEDED"
    steps = [m["trainingStep"] for m in hopeless["allMetrics"]]
    assert steps[:2] == [10, 20] and 20 <= hopeless["stoppedAtStep"] < 50 and steps[-1] < 50
    assert max(m["objectiveValue"] for m in hopeless["allMetrics"]) < trials["1"]["allMetrics"][1]["objectiveValue"]
    assert output["bestTrial"]["trialId"] == "1"

    store = JobStore(home)
    job = store.get("stop-hp-trial-2")
    assert job.state is JobState.CANCELLED and job.history[-1].message.startswith("stopped early at step")
    trial_dir = tmp_path / "study" / "2"
    import tensorflow as tf
    kept = tf.train.latest_checkpoint(str(trial_dir))
    assert kept is not None and int(kept.rsplit("-", 1)[1]) >= 20  # the last checkpoint before the stop is kept
    pids = [store.supervisor("stop-hp").pid] + [p for t in store.children("stop-hp")
                                                for _, p, _ in store.task_processes(t)]
    deadline = time.monotonic() + 30
    while any(is_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(is_alive(p) for p in pids)  # every process of the stopped trial (and the others) is gone

    capsys.readouterr()
    assert main(["jobs", "describe", "stop-hp", "--plot", str(tmp_path / "curves.png")]) == 0
    assert f"stopped early at step {hopeless['stoppedAtStep']}" in capsys.readouterr().out
    assert (tmp_path / "curves.png").stat().st_size > 1000
