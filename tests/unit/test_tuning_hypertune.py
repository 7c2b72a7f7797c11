"""Measurements reported with cloudml-hypertune (``import hypertune``), read back as a trial's objective.

Every file here is written by the real ``hypertune`` package, pointed at a trial
directory the way a tuning job points it (``trial_environment``).
"""
from __future__ import annotations

import logging

import hypertune
import pytest

from toolkit import report_metric
from toolkit.hypertune import ENV_METRIC_FILE, ENV_TRIAL_DIR, ENV_TRIAL_ID, METRIC_FILE, trial_environment
from toolkit.jobs.tuning import read_objective, read_scalars, resolve_tag
from toolkit.jobs.tuning._objective import EventTail
from toolkit.jobs.tuning._watch import TrialWatch, measurement_docs


@pytest.fixture
def trial_dir(tmp_path, monkeypatch):
    """A trial directory whose environment is what a tuning job gives trial 2's tasks."""
    directory = tmp_path / "study" / "2"
    for key, value in trial_environment(directory, 2).items():
        monkeypatch.setenv(key, value)
    return directory


def _report(hpt, values, tag="accuracy"):
    for step, value in values:
        hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=tag, metric_value=value, global_step=step)


def test_trial_environment_points_hypertune_into_the_trial_dir(trial_dir):
    env = trial_environment(trial_dir, 2)
    assert env == {ENV_TRIAL_DIR: str(trial_dir), ENV_METRIC_FILE: str(trial_dir / METRIC_FILE), ENV_TRIAL_ID: "2"}
    hpt = hypertune.HyperTune()
    _report(hpt, [(10, 0.5)])
    line = (trial_dir / METRIC_FILE).read_text()
    assert '"accuracy": "0.5"' in line and '"global_step": "10"' in line and '"trial": "2"' in line


def test_hypertune_reports_are_measurements_final_or_best(trial_dir):
    _report(hypertune.HyperTune(), [(10, 0.5), (20, 0.8), (30, 0.6)])
    series = read_scalars(trial_dir)
    assert [(p.step, p.value) for p in series[("hypertune", "accuracy")]] == [(10, 0.5), (20, 0.8), (30, 0.6)]
    assert resolve_tag(list(series), "accuracy") == ("hypertune", "accuracy")
    assert resolve_tag(list(series), "hypertune/accuracy") == ("hypertune", "accuracy")
    assert read_objective(trial_dir, "accuracy", goal="MAXIMIZE") == (0.6, 30)
    assert read_objective(trial_dir, "accuracy", goal="MAXIMIZE", mode="BEST") == (0.8, 20)
    assert read_objective(trial_dir, "accuracy", goal="MINIMIZE", mode="BEST") == (0.5, 10)


def test_the_watch_gives_one_measurement_per_step_as_all_metrics(trial_dir):
    hpt = hypertune.HyperTune()
    watch = TrialWatch(trial_dir, "loss")
    assert watch.poll() == []
    _report(hpt, [(1, 2.0), (2, 1.5)], tag="loss")
    assert [(p.step, p.value) for p in watch.poll()] == [(1, 2.0), (2, 1.5)]
    _report(hpt, [(2, 1.25), (3, 1.0)], tag="loss")      # step 2 again (a restart): the later one counts
    assert measurement_docs(watch.poll()) == [{"trainingStep": 1, "objectiveValue": 2.0},
                                              {"trainingStep": 2, "objectiveValue": 1.25},
                                              {"trainingStep": 3, "objectiveValue": 1.0}]


def test_reports_the_package_drops_after_100_are_kept_once_read(trial_dir):
    hpt = hypertune.HyperTune()
    tail = EventTail(trial_dir)
    for step in range(110):
        _report(hpt, [(step, step / 110)])
        if step % 40 == 0:
            assert tail.poll()
    tail.poll()
    assert len((trial_dir / METRIC_FILE).read_text().splitlines()) == 100   # the package keeps the last 100
    assert [p.step for p in tail.series[("hypertune", "accuracy")]] == list(range(110))   # 0..9 no longer in the file
    assert not tail.poll()   # nothing new


def test_a_report_without_a_step_is_step_zero_and_the_latest_counts(trial_dir):
    hpt = hypertune.HyperTune()
    hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=0.7)
    hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=0.9)
    assert read_objective(trial_dir, "accuracy", goal="MINIMIZE") == (0.9, 0)


def test_hypertune_outranks_summaries_of_the_same_tag(trial_dir):
    report_metric("accuracy", 0.1, 50)           # a TensorBoard scalar at the top of the trial dir
    _report(hypertune.HyperTune(), [(5, 0.9)])
    assert read_objective(trial_dir, "accuracy", goal="MAXIMIZE") == (0.9, 5)


def test_malformed_lines_are_skipped_with_one_warning_each(trial_dir, caplog):
    _report(hypertune.HyperTune(), [(10, 0.5), (20, 0.8)])
    path = trial_dir / METRIC_FILE
    good = path.read_text()
    bad = ['not json at all', '[1, 2]', '{"accuracy": "high", "global_step": "30"}',
           '{"accuracy": "0.9", "global_step": "thirty"}', '{"timestamp": 1.0, "global_step": "5"}']
    path.write_text(good + "\n".join(bad) + "\n" + '{"accuracy": "0.95", "global_step": "40"}\n')
    tail = EventTail(trial_dir)
    with caplog.at_level(logging.WARNING, logger="toolkit.jobs.tuning._metric_file"):
        assert tail.poll()
        tail.poll()   # read again: the same lines are not warned about twice
    assert [(p.step, p.value) for p in tail.series[("hypertune", "accuracy")]] == [(10, 0.5), (20, 0.8), (40, 0.95)]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 5, warnings
    assert f"{path} line 3 skipped: not JSON" in warnings[0] and "received: not json at all" in warnings[0]
    assert "line 4 skipped: expected a JSON object, got list" in warnings[1]
    assert "line 5 skipped: `accuracy` is 'high'; expected a number" in warnings[2]
    assert "line 6 skipped: `global_step` is 'thirty'; expected an integer" in warnings[3]
    assert "line 7 skipped: no metric in it (only global_step, timestamp)" in warnings[4]


def test_a_last_line_being_written_is_read_once_whole(trial_dir, caplog):
    path = trial_dir / METRIC_FILE
    path.parent.mkdir(parents=True)
    path.write_text('{"accuracy": "0.5", "global_step": "1"}\n{"accuracy": "0.')
    tail = EventTail(trial_dir)
    with caplog.at_level(logging.WARNING):
        tail.poll()
        assert [p.step for p in tail.series[("hypertune", "accuracy")]] == [1]
        path.write_text('{"accuracy": "0.5", "global_step": "1"}\n{"accuracy": "0.75", "global_step": "2"}\n')
        assert tail.poll()
    assert [(p.step, p.value) for p in tail.series[("hypertune", "accuracy")]] == [(1, 0.5), (2, 0.75)]
    assert not caplog.records
