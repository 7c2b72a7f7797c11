"""A trial's objective read back from real TensorBoard event files, and report_metric writing them."""
from __future__ import annotations

import json
import math

import pytest

from toolkit import report_metric
from toolkit.hypertune import ENV_TRIAL_DIR, MetricError
from toolkit.jobs.tuning import TuningError, read_objective, read_scalars, resolve_tag


def _tf_summaries(directory, run, values, tag="accuracy"):
    """Writes scalars the way toolkit.fit does: TF 2 tensor summaries in ``<dir>/<run>``."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(directory / run))
    with writer.as_default():
        for step, value in values:
            tf.summary.scalar(tag, value, step=step)
    writer.close()


def test_tf_summaries_are_read_by_run_and_tag_final_or_best(tmp_path):
    _tf_summaries(tmp_path, "train", [(10, 0.5), (20, 0.7), (30, 0.65)])
    _tf_summaries(tmp_path, "validation", [(10, 0.4), (20, 0.8), (30, 0.6)])
    _tf_summaries(tmp_path, "train", [(30, 0.2)], tag="loss")
    series = read_scalars(tmp_path)
    points = [(p.step, round(p.value, 4)) for p in series[("validation", "accuracy")]]
    assert points == [(10, 0.4), (20, 0.8), (30, 0.6)]
    assert resolve_tag(list(series), "accuracy") == ("validation", "accuracy")  # validation outranks train
    assert resolve_tag(list(series), "val_accuracy") == ("validation", "accuracy")
    assert resolve_tag(list(series), "train/accuracy") == ("train", "accuracy")
    assert resolve_tag(list(series), "loss") == ("train", "loss")
    assert read_objective(tmp_path, "val_accuracy", goal="MAXIMIZE") == (pytest.approx(0.6), 30)
    assert read_objective(tmp_path, "val_accuracy", goal="MAXIMIZE", mode="BEST") == (pytest.approx(0.8), 20)
    assert read_objective(tmp_path, "train/accuracy", goal="MINIMIZE", mode="BEST") == (pytest.approx(0.5), 10)


def test_reported_metrics_win_over_run_summaries_and_a_missing_tag_lists_what_exists(tmp_path):
    _tf_summaries(tmp_path, "validation", [(5, 0.9)])
    report_metric("accuracy", 0.42, 7, directory=tmp_path)
    assert read_objective(tmp_path, "accuracy", goal="MAXIMIZE") == (pytest.approx(0.42), 7)
    with pytest.raises(TuningError, match=r"hyperparameterMetricTag 'acuracy' names no scalar in the TensorBoard "
                                          r"events under .* \(found: accuracy, validation/accuracy\). Fix the tag, or "
                                          r"call toolkit.report_metric\('acuracy', value, step\)"):
        read_objective(tmp_path, "acuracy", goal="MAXIMIZE")
    with pytest.raises(TuningError, match=r"\(found: no scalars at all\)"):
        read_objective(tmp_path / "empty", "accuracy", goal="MAXIMIZE")


def test_report_metric_writes_where_the_trial_says_only_on_the_chief(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_TRIAL_DIR, raising=False)
    assert report_metric("score", 1.0, 0) is None  # not a trial: nothing to write, no error
    assert not list(tmp_path.iterdir())
    trial = tmp_path / "trial-3"
    worker = {ENV_TRIAL_DIR: str(trial), "TF_CONFIG": json.dumps(
        {"cluster": {"master": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}})}
    assert report_metric("score", 1.0, 0, environ=worker) is None
    monkeypatch.setenv(ENV_TRIAL_DIR, str(trial))
    path = report_metric("score", 0.5, 1)
    assert report_metric("score", 0.25, 2) == path and path.parent == trial and ".tfevents." in path.name
    assert report_metric("score", float("nan"), 3) == path
    assert [(p.step, p.value) for p in read_scalars(trial)[("", "score")]][:2] == [(1, 0.5), (2, 0.25)]
    assert math.isnan(read_objective(trial, "score", goal="MAXIMIZE")[0])  # a diverged run's final value is NaN
    assert read_objective(trial, "score", goal="MAXIMIZE", mode="BEST") == (0.5, 1)


def test_a_torn_last_record_is_ignored(tmp_path):
    path = report_metric("score", 0.5, 1, directory=tmp_path)
    report_metric("score", 0.75, 2, directory=tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the writer was killed mid-record
    assert read_objective(tmp_path, "score", goal="MAXIMIZE") == (0.5, 1)


@pytest.mark.parametrize("args, field, text", [
    (("", 1.0, 0), "tag", "report_metric `tag` received ''; expected a non-empty string"),
    (("acc", "high", 0), "value", "report_metric `value` received 'high'; expected a number. Pass float(metric)."),
    (("acc", True, 0), "value", "received True; expected a number"),
    (("acc", float("inf"), 0), "value", "received inf; expected a finite number"),
    (("acc", 1.0, -1), "step", "report_metric `step` is -1; expected an integer >= 0"),
])
def test_report_metric_rejects_bad_arguments(tmp_path, args, field, text):
    with pytest.raises(MetricError, match=text.replace("(", r"\(").replace(")", r"\)")) as info:
        report_metric(*args, directory=tmp_path)
    assert info.value.field == field


def test_a_trial_directory_is_read_while_checkpoints_come_and_go(tmp_path):
    """TensorFlow writes each checkpoint into ``ckpt-N_temp/`` and renames it away: a directory can vanish while
    the tuner walks the trial's directory, which must pass over it, not fail the study."""
    import shutil
    import threading

    from toolkit.jobs.tuning._objective import EventTail
    from toolkit.jobs.tuning._watch import first_checkpoint

    report_metric("accuracy", 0.5, step=1, directory=tmp_path)
    (tmp_path / "ckpt-1.index").write_bytes(b"")
    stop, errors = threading.Event(), []

    def churn():
        n = 0
        while not stop.is_set():
            temp = tmp_path / f"ckpt-{n}_temp" / "deeper"
            temp.mkdir(parents=True)
            for i in range(20):
                (temp / f"part-{i}.index").write_bytes(b"")
            shutil.rmtree(tmp_path / f"ckpt-{n}_temp")
            n += 1

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(300):
            try:
                EventTail(tmp_path).poll()
                assert first_checkpoint(tmp_path) is not None
            except FileNotFoundError as exc:  # what Path.rglob raised
                errors.append(exc)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert read_scalars(tmp_path)[("", "accuracy")][0].value == 0.5


def test_a_tag_tf_renamed_is_followed_with_a_warning_said_once(tmp_path, caplog):
    report_metric("epoch_accuracy", 0.61, 3, directory=tmp_path / "train")  # TF 2's name for TF 1's epoch_acc
    report_metric("epoch_accuracy", 0.72, 3, directory=tmp_path / "validation")
    series = read_scalars(tmp_path)
    with caplog.at_level("WARNING", logger="toolkit.jobs.tuning._objective"):
        for _ in range(3):  # the study resolves the tag at every poll; it says so once
            assert resolve_tag(list(series), "epoch_acc") == ("validation", "epoch_accuracy")
        assert read_objective(tmp_path, "val_acc", goal="MAXIMIZE") == (pytest.approx(0.72), 3)
        assert resolve_tag(list(series), "train/epoch_acc") == ("train", "epoch_accuracy")
    said = [r.getMessage() for r in caplog.records]
    assert said.count("hyperparameterMetricTag 'epoch_acc' is the name TF 1.x wrote; TF 2 writes 'epoch_accuracy', "
                      "which the study follows (found as validation/epoch_accuracy). Rename the tag to "
                      "'epoch_accuracy' to silence this.") == 1
    assert any("'val_acc' is the name TF 1.x wrote; TF 2 writes 'validation/epoch_accuracy'" in m for m in said)
    assert len(said) == 3
    assert resolve_tag(list(series), "epoch_acuracy") is None  # a typo is not a rename: the study fails on it
