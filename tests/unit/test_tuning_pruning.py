"""The early-stopping and measurement fields of a tuning spec, the pruners by name, and reading a
running trial's measurements as they are written."""
from __future__ import annotations

import math
import os

import optuna
import pytest
import yaml

from toolkit import report_metric
from toolkit.jobs import JobSpec, JobSpecError
from toolkit.jobs.tuning._objective import Point, select
from toolkit.jobs.tuning._pruning import PRUNERS, make_pruner, may_stop
from toolkit.jobs.tuning._watch import TrialWatch, measurement_docs

BASE = {"trainingInput": {"scaleTier": "BASIC", "pythonModule": "trainer.task", "hyperparameters": {
    "goal": "MAXIMIZE", "hyperparameterMetricTag": "score", "maxTrials": 8, "maxParallelTrials": 2,
    "params": [{"parameterName": "n", "type": "INTEGER", "minValue": 1, "maxValue": 4}]}}}


def _hp(**fields):
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    doc["trainingInput"]["hyperparameters"].update(fields)
    spec = JobSpec.from_dict(doc, job_id="hp")
    return spec.training_input.hyperparameters, spec.warnings


def test_measurement_selection_and_its_older_spelling():
    assert _hp()[0].measurement_selection == "LAST_MEASUREMENT"
    assert _hp(measurementSelectionType="best_measurement")[0].metric_value == "BEST"
    assert _hp(hyperparameterMetricValue="BEST")[0].measurement_selection == "BEST_MEASUREMENT"
    with pytest.raises(JobSpecError, match="measurementSelectionType: is LAST_MEASUREMENT but "
                                           "hyperparameterMetricValue is BEST; they choose the same thing"):
        _hp(measurementSelectionType="LAST_MEASUREMENT", hyperparameterMetricValue="BEST")
    with pytest.raises(JobSpecError, match=r"measurementSelectionType: received 'BEST'; expected one of "
                                           r"LAST_MEASUREMENT, BEST_MEASUREMENT"):
        _hp(measurementSelectionType="BEST")


def test_early_stopping_block_pruner_names_and_bad_values():
    hp, _ = _hp(enableTrialEarlyStopping=True)
    assert (hp.early_stopping.pruner, hp.early_stopping.min_measurements) == ("MEDIAN", 3)
    assert isinstance(make_pruner(hp), optuna.pruners.MedianPruner)
    assert make_pruner(hp)._n_startup_trials == 2  # maxParallelTrials: the first batch always runs to its end
    assert isinstance(make_pruner(_hp()[0]), optuna.pruners.NopPruner)  # off: measurements only
    with pytest.raises(JobSpecError) as caught:
        _hp(enableTrialEarlyStopping=True, earlyStopping={"pruner": "medain", "minMeasurements": 0,
                                                          "percentile": 120})
    text = str(caught.value)
    assert ("earlyStopping.pruner: received 'medain'; expected one of MEDIAN, PERCENTILE, SUCCESSIVE_HALVING, "
            "HYPERBAND. Pick one of the listed values. Did you mean 'MEDIAN'?") in text
    assert "earlyStopping.minMeasurements: received 0; expected an integer >= 1" in text
    assert "earlyStopping.percentile: received 120; expected a number between 0 and 100" in text
    for name, kind in (("percentile", optuna.pruners.PercentilePruner),
                       ("successive_halving", optuna.pruners.SuccessiveHalvingPruner),
                       ("hyperband", optuna.pruners.HyperbandPruner)):
        assert isinstance(make_pruner(_hp(enableTrialEarlyStopping=True, earlyStopping={"pruner": name})[0]), kind)
    assert set(PRUNERS) == {"MEDIAN", "PERCENTILE", "SUCCESSIVE_HALVING", "HYPERBAND"}


def test_never_asked_before_the_minimum_of_measurements_and_warnings_for_what_is_odd():
    hp, _ = _hp(enableTrialEarlyStopping=True, earlyStopping={"minMeasurements": 4})
    assert [may_stop(hp, n) for n in (1, 3, 4, 9)] == [False, False, True, True]
    assert not may_stop(_hp()[0], 9)
    _, warnings = _hp(earlyStopping={"pruner": "MEDIAN"})
    assert any(w.field.endswith("earlyStopping") and "no effect without `enableTrialEarlyStopping: true`"
               in w.message for w in warnings)
    _, warnings = _hp(algorithm="GRID_SEARCH", enableTrialEarlyStopping=True)
    assert any("a grid point whose trial is stopped early is not run again" in w.message for w in warnings)


def test_best_and_last_measurement_and_nan():
    points = [Point(1, 0.0, 0.5), Point(2, 1.0, 0.9), Point(3, 2.0, 0.7), Point(4, 3.0, math.nan)]
    assert select(points, goal="MAXIMIZE", mode="BEST").step == 2
    assert select(points, goal="MINIMIZE", mode="BEST").step == 1
    assert math.isnan(select(points, goal="MAXIMIZE", mode="FINAL").value)  # the last is NaN: the truth
    assert measurement_docs(points[2:]) == [{"trainingStep": 3, "objectiveValue": 0.7},
                                            {"trainingStep": 4, "objectiveValue": None}]


def test_a_watch_reads_only_what_was_appended_and_names_a_missing_tag_after_a_checkpoint(tmp_path):
    watch = TrialWatch(tmp_path, "score")
    assert watch.poll() == [] and watch.missing_tag() is None  # nothing written yet
    report_metric("score", 0.5, 1, directory=tmp_path, environ={})
    report_metric("score", 0.6, 2, directory=tmp_path, environ={})
    assert [(p.step, p.value) for p in watch.poll()] == [(1, 0.5), (2, pytest.approx(0.6))]
    report_metric("score", 0.7, 2, directory=tmp_path, environ={})  # a restarted task writes step 2 again
    assert [(p.step, round(p.value, 3)) for p in watch.poll()] == [(1, 0.5), (2, 0.7)]

    other = tmp_path / "other"
    typo = TrialWatch(other, "scroe")
    report_metric("loss", 1.0, 1, directory=other, environ={})
    typo.poll()
    assert typo.missing_tag() is None and typo.missing_tag() is None  # no checkpoint yet: too early to say
    (other / "ckpt-1.index").write_bytes(b"")
    os.utime(other / "ckpt-1.index", (0, 0))  # written before the scalar that follows
    report_metric("loss", 0.9, 2, directory=other, environ={})
    typo.poll()
    assert typo.missing_tag() is None  # once could be a writer mid-flush
    message = typo.missing_tag()
    assert message is not None and message.startswith("after its first checkpoint: hyperparameterMetricTag "
                                                      "'scroe' names no scalar")
    assert "(found: loss)" in message and typo.missing_tag() is None  # said once
