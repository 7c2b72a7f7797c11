"""A tuning job over a published-style trainer package that reports its metric with ``import hypertune``.

The package is written as CMLE / AI Platform samples were (``trainer/task.py``,
hyphenated flags, ``--job-dir``) and reports through Google's own
cloudml-hypertune package, unchanged: nothing in it knows tfdist. It computes
its metric from its hyperparameters (no TensorFlow, so the job takes seconds)
and reports it at three steps. The trials' objectives and ``allMetrics`` can
only come from the metric file each trial wrote into its own directory.
"""
from __future__ import annotations

import json

import pytest
from _study import submit_study

pytestmark = pytest.mark.cluster

_CONFIG = """\
trainingInput:
  scaleTier: BASIC
  pythonModule: trainer.task
  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: accuracy
    maxTrials: 2
    maxParallelTrials: 2
    maxFailedTrials: 0
    algorithm: RANDOM_SEARCH
    params:
      - parameterName: learning-rate
        type: DOUBLE
        minValue: 0.01
        maxValue: 0.5
        scaleType: UNIT_LOG_SCALE
      - parameterName: hidden-units
        type: INTEGER
        minValue: 1
        maxValue: 8
"""

_TASK = '''\
"""Trains the model and reports its accuracy for hyperparameter tuning (as a CMLE sample's task.py)."""
import argparse
import json
import os

import hypertune


def accuracies(learning_rate, hidden_units):
    base = 0.9 - 10 * (learning_rate - 0.1) ** 2 - hidden_units / 100
    return [(10, base - 0.2), (20, base + 0.05), (30, base)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--hidden-units", type=int, default=4)
    args = parser.parse_args()
    hpt = hypertune.HyperTune()
    for step, accuracy in accuracies(args.learning_rate, args.hidden_units):
        hpt.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="accuracy", metric_value=accuracy, global_step=step)
    with open(os.path.join(args.job_dir, "env.json"), "w") as fh:
        json.dump({key: os.environ.get(key) for key in ("CLOUD_ML_HP_METRIC_FILE", "CLOUD_ML_TRIAL_ID")}, fh)
'''


def _expected(learning_rate: float, hidden_units: int) -> list[tuple[int, float]]:
    base = 0.9 - 10 * (learning_rate - 0.1) ** 2 - hidden_units / 100
    return [(10, base - 0.2), (20, base + 0.05), (30, base)]


def test_a_hypertune_package_reports_each_trials_measurements(tmp_path, monkeypatch, no_orphans):
    home = tmp_path / "home"
    monkeypatch.setenv("TFDIST_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hptuning_config.yaml").write_text(_CONFIG)
    trainer = tmp_path / "src" / "trainer"
    trainer.mkdir(parents=True)
    (trainer / "__init__.py").write_text("")
    (trainer / "task.py").write_text(_TASK)
    record, _ = submit_study(home, "hypertune-hp", trainer, timeout=120)

    output = record.details["trainingOutput"]
    assert output["completedTrialCount"] == 2 and len(output["trials"]) == 2
    for doc in output["trials"]:
        trial_id, values = doc["trialId"], doc["hyperparameters"]
        expected = _expected(values["learning-rate"], values["hidden-units"])
        # every measurement the trainer reported, at its global_step, and the final one as the objective
        assert doc["allMetrics"] == [{"trainingStep": step, "objectiveValue": pytest.approx(value)}
                                     for step, value in expected]
        assert doc["finalMetric"] == {"trainingStep": 30, "objectiveValue": pytest.approx(expected[-1][1])}
        # the trial's tasks wrote into the trial's own directory, stamped with its trial id (as CMLE set them)
        trial_dir = tmp_path / "study" / trial_id
        env = json.loads((trial_dir / "env.json").read_text())
        metric_file = trial_dir / "hypertune" / "output.metrics"
        assert env == {"CLOUD_ML_HP_METRIC_FILE": str(metric_file), "CLOUD_ML_TRIAL_ID": trial_id}
        lines = [json.loads(line) for line in metric_file.read_text().splitlines()]
        assert [(line["trial"], int(line["global_step"])) for line in lines] == [(trial_id, s) for s, _ in expected]
    best = output["bestTrial"]
    assert best["finalMetric"]["objectiveValue"] == max(t["finalMetric"]["objectiveValue"] for t in output["trials"])
