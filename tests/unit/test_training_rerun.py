"""``fit`` run again on a ``model_dir`` that is already trained to the end (a re-run script or notebook)."""
from __future__ import annotations

import json
import logging

import keras
from _models import compiled

import models
from toolkit import data, fit
from toolkit.training import FitOptions
from toolkit.training.rerun import FINAL_METRICS_FILE

BATCH = 64


def _fit(model_dir, **kwargs):
    train, test = data.load("digits"), data.load("digits", split="test")
    validation = test.dataset_fn(BATCH, shuffle=False, repeat=False, drop_remainder=False)
    arguments = dict(epochs=2, steps_per_epoch=4, validation_fn=validation, model_dir=str(model_dir), verbose=0,
                     options=FitOptions(export=False))
    arguments.update(kwargs)
    model_fn = compiled(models.digits_mlp, seed=0, optimizer=lambda: keras.optimizers.Adam(1e-2),
                        steps_per_execution=2)
    return fit(model_fn, train.dataset_fn(BATCH, seed=1), **arguments)


def test_a_finished_model_dir_says_so_and_returns_the_final_metrics(tmp_path, caplog):
    first = _fit(tmp_path)
    kept = json.loads((tmp_path / FINAL_METRICS_FILE).read_text())
    assert kept["global_step"] == first.global_step and kept["epoch"] == 1
    with caplog.at_level(logging.WARNING, logger="toolkit.training.rerun"):
        again = _fit(tmp_path)
    assert "is already trained to global step" in caplog.text and "nothing to train" in caplog.text
    assert again.global_step == first.global_step and again.epoch == [1]
    assert again.history == {name: values[-1:] for name, values in first.history.items()}
    assert again.final("val_accuracy") == first.final("val_accuracy")


def test_a_finished_model_dir_without_the_file_is_evaluated_once(tmp_path, caplog):
    first = _fit(tmp_path)
    (tmp_path / FINAL_METRICS_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="toolkit.training.rerun"):
        again = _fit(tmp_path)
    assert "evaluating it once" in caplog.text
    assert again.epoch == [1] and set(again.history) == {"val_loss", "val_accuracy"}
    assert abs(again.final("val_accuracy") - first.final("val_accuracy")) < 1e-6
