"""Intermediate measurements and trial early stopping, end to end with trainers that need no TensorFlow.

Each test submits a real tuning job: a detached supervisor runs the Optuna
study, every trial is a process started through the launcher, and what is
asserted (measurements with their steps, a trial stopped early and its process
gone, its files kept, describe's view, the plot) is what a user gets.
"""
from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from _polling import wait_until

from toolkit.cli import main
from toolkit.jobs import JobSpec, JobState, JobStore, api
from toolkit.jobs.engines.local._procs import is_alive

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
TRAINER = str(FIXTURES / "trainer")


def _submit(name: str, module: str, *args: str, **hyper) -> None:
    doc = yaml.safe_load((FIXTURES / "tune_probe.yaml").read_text())
    doc["trainingInput"]["pythonModule"] = module
    if module == "trainer.curve_probe":
        doc["trainingInput"]["hyperparameters"]["params"] = [
            {"parameterName": "x", "type": "DOUBLE", "minValue": 0.5, "maxValue": 1.0}]
    doc["trainingInput"]["hyperparameters"].update(hyper)
    spec = JobSpec.from_dict(doc, job_id=name, overrides={"packagePath": TRAINER, "args": list(args) or None,
                                                          "jobDir": name})
    api.submit(spec)


def _finished(name: str, timeout: float = 120):
    return wait_until(lambda: (r := api.describe(name)).is_final and r, timeout=timeout, what=f"{name} to end")


def test_a_hopeless_trial_is_stopped_early_and_the_others_finish(home, tmp_path, capsys, no_orphans):
    _submit("stop", "trainer.curve_probe", "--steps", "8", "--step-seconds", "0.4", "--hopeless-trial", "3",
            maxTrials=3, enableTrialEarlyStopping=True, earlyStopping={"minMeasurements": 2})
    record = _finished("stop")
    assert record.state is JobState.SUCCEEDED, record.error
    output = record.details["trainingOutput"]
    trials = {t["trialId"]: t for t in output["trials"]}
    assert output["completedTrialCount"] == 3 and output["failedTrialCount"] == 0  # stopped counts as finished
    assert output["stoppedEarlyTrialCount"] == 1
    for n in ("1", "2"):  # the first batch runs to its end (startupTrials defaults to maxParallelTrials)
        doc = trials[n]
        assert doc["state"] == "SUCCEEDED" and doc["isTrialStoppedEarly"] is False
        assert [m["trainingStep"] for m in doc["allMetrics"]] == list(range(1, 9))
        x = doc["hyperparameters"]["x"]
        assert [m["objectiveValue"] for m in doc["allMetrics"]] == pytest.approx([x * s / 8 for s in range(1, 9)])
        assert doc["finalMetric"] == {"trainingStep": 8, "objectiveValue": pytest.approx(x)}
    hopeless = trials["3"]
    assert hopeless["state"] == "SUCCEEDED" and hopeless["isTrialStoppedEarly"] is True
    stopped_at = hopeless["stoppedAtStep"]  # where the pruner spoke; a step written before the stop is kept too
    assert 2 <= stopped_at < 8 and {m["objectiveValue"] for m in hopeless["allMetrics"]} == {-1.0}
    assert [m["trainingStep"] for m in hopeless["allMetrics"]][:stopped_at] == list(range(1, stopped_at + 1))
    assert hopeless["allMetrics"][-1]["trainingStep"] <= stopped_at + 1
    assert hopeless["finalMetric"]["objectiveValue"] == -1.0  # its best measurement takes part
    assert output["bestTrial"]["trialId"] in ("1", "2")

    store = JobStore(home)
    job = store.get("stop-trial-3")  # the trial's job: stopped as a cancel stops it, with the reason
    assert job.state is JobState.CANCELLED and job.details["isTrialStoppedEarly"] is True
    assert job.history[-1].message.startswith(f"stopped early at step {stopped_at} by the MEDIAN pruner")
    assert job.details["measurements"] == hopeless["allMetrics"]
    trial_dir = tmp_path / "stop" / "3"
    assert not is_alive(int((trial_dir / "pid").read_text()))  # its process is gone
    assert (trial_dir / f"ckpt-{stopped_at}.index").exists()  # its files, last checkpoint included, are kept
    assert not (trial_dir / "ckpt-8.index").exists()

    study = optuna.load_study(study_name="stop", storage=store.url)  # the study holds every measurement
    by_id = {t.user_attrs["trialId"]: t for t in study.trials}
    assert by_id[3].state is optuna.trial.TrialState.PRUNED
    assert sorted(by_id[3].intermediate_values) == [m["trainingStep"] for m in hopeless["allMetrics"]]
    assert sorted(by_id[1].intermediate_values) == list(range(1, 9))

    capsys.readouterr()
    assert main(["jobs", "describe", "stop", "--plot", str(tmp_path / "curves.png")]) == 0
    out = capsys.readouterr().out
    assert "trials: 3 succeeded (1 stopped early), 0 failed" in out
    assert f"stopped early at step {stopped_at}" in out
    assert "measurements (step:value):" in out and "  trial 3: 1:-1 2:-1" in out
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["jobs", "describe", "stop-trial-3"]) == 0
    out = capsys.readouterr().out
    assert "measurements (step:value): 1:-1 2:-1" in out and "isTrialStoppedEarly: true (stopped early" in out
    assert main(["jobs", "stream-logs", "stop"]) == 0
    assert f"trial 3 stopped early at step {stopped_at} by the MEDIAN pruner" in capsys.readouterr().out


def test_best_or_last_measurement_is_the_objective(home):
    _submit("best", "trainer.tune_probe", maxTrials=2, measurementSelectionType="BEST_MEASUREMENT")
    _submit("last", "trainer.tune_probe", maxTrials=2, measurementSelectionType="LAST_MEASUREMENT")
    for name, step, offset in (("best", 1, 0.25), ("last", 2, 0.0)):  # tune_probe: steps 0..2, best at 1
        record = _finished(name)
        assert record.state is JobState.SUCCEEDED, record.error
        output = record.details["trainingOutput"]
        assert output["measurementSelectionType"] == f"{name.upper()}_MEASUREMENT"
        for doc in output["trials"]:
            values = doc["hyperparameters"]
            score = -(values["x"] - 0.3) ** 2 - values["y"] / 100
            assert [m["trainingStep"] for m in doc["allMetrics"]] == [0, 1, 2]
            assert doc["finalMetric"] == {"trainingStep": step, "objectiveValue": pytest.approx(score + offset)}


def test_nan_measurements_are_kept_and_a_nan_last_measurement_fails_the_trial(home, capsys):
    _submit("nan", "trainer.curve_probe", "--steps", "3", "--step-seconds", "0.1", "--nan-from", "3",
            maxTrials=1, maxParallelTrials=1, measurementSelectionType="LAST_MEASUREMENT")
    record = _finished("nan")
    assert record.state is JobState.FAILED
    doc = record.details["trainingOutput"]["trials"][0]
    assert doc["state"] == "FAILED"
    assert doc["error"].startswith("the LAST_MEASUREMENT of 'score' is NaN (step 3)")
    assert [m["trainingStep"] for m in doc["allMetrics"]] == [1, 2, 3]
    x = doc["hyperparameters"]["x"]
    assert doc["allMetrics"][2]["objectiveValue"] is None
    assert doc["allMetrics"][1]["objectiveValue"] == pytest.approx(x * 2 / 3, rel=1e-6)
    assert main(["jobs", "describe", "nan", "--format", "json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text.replace("is NaN", "")  # the store stays readable: strict JSON, no bare NaN
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))["jobId"] == "nan"


def test_a_metric_tag_that_never_appears_is_named_after_the_first_checkpoint(home, tmp_path):
    _submit("typo", "trainer.curve_probe", "--steps", "40", "--step-seconds", "0.3", maxTrials=1,
            maxParallelTrials=1, hyperparameterMetricTag="scroe")
    log = JobStore(home).job_dir("typo") / "logs" / "study.log"
    wait_until(lambda: log.exists() and "after its first checkpoint" in log.read_text(), timeout=60,
               what="the missing tag to be named")
    assert api.describe("typo-trial-1").state is JobState.RUNNING  # said while it runs, not at its end
    line = next(line for line in log.read_text().splitlines() if "after its first checkpoint" in line)
    assert "trial 1: after its first checkpoint: hyperparameterMetricTag 'scroe' names no scalar" in line
    assert "(found: score)" in line
    assert api.cancel("typo", timeout=60).state is JobState.CANCELLED
    doc = api.describe("typo").details["trainingOutput"]["trials"][0]
    assert "names no scalar" in doc["warning"]


def test_katib_dry_run_of_a_tuning_job(home, capsys):
    assert main(["jobs", "submit", "training", "digits-hp", "--config", str(FIXTURES / "digits_tuning.yaml"),
                 "--backend", "kubernetes", "--dry-run"]) == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    from toolkit.jobs.engines.kubernetes.katib import validate_experiment
    assert validate_experiment(manifest) == []
    spec = manifest["spec"]
    assert manifest["kind"] == "Experiment" and spec["objective"]["objectiveMetricName"] == "validation/accuracy"
    assert spec["objective"]["metricStrategies"] == [{"name": "validation/accuracy", "value": "latest"}]
    assert (spec["maxTrialCount"], spec["parallelTrialCount"], spec["maxFailedTrialCount"]) == (4, 2, 1)
    assert spec["parameters"][0] == {"name": "learning_rate", "parameterType": "double", "feasibleSpace": {
        "min": "0.0005", "max": "0.05", "distribution": "logUniform"}}
    container = spec["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"][0]
    assert "--learning_rate=${trialParameters.learning_rate}" in container["args"]
    assert JobStore(home).names() == []  # a dry run records nothing
    bad = {**manifest, "spec": {**spec, "parallelTrialCount": "2", "bogus": 1}}
    assert set(validate_experiment(bad)) == {
        "spec: Additional properties are not allowed ('bogus' was unexpected)",
        "spec.parallelTrialCount: '2' is not of type 'integer'"}


def test_kubernetes_refuses_what_katib_cannot_run(home, tmp_path, capsys):
    doc = yaml.safe_load((FIXTURES / "digits_tuning.yaml").read_text())
    doc["trainingInput"]["hyperparameters"].update(enableTrialEarlyStopping=True,
                                                   earlyStopping={"pruner": "hyperband"})
    config = tmp_path / "hb.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert main(["jobs", "submit", "training", "hb", "--config", str(config), "--backend", "kubernetes",
                 "--dry-run"]) != 0
    err = capsys.readouterr().err
    assert "earlyStopping.pruner" in err and "is HYPERBAND, but Katib stops trials by the median rule only" in err
