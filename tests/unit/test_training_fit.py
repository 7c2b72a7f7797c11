"""``toolkit.fit`` in one process (default strategy): training, chief artifacts, resume, evaluator."""
from __future__ import annotations

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from _models import compiled

import models
from tf_config import TFConfig
from tf_config.ports import pick_port
from toolkit import data, fit
from toolkit.training import CheckpointConfig, FitOptions, TrainingError, ValidationConfig

BATCH = 64
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
_OPTION_NAMES = {field.name for field in dataclasses.fields(FitOptions)}
_COMPILE = {"loss", "metrics", "optimizer", "steps_per_execution"}


@pytest.fixture(scope="module")
def digits():
    return data.load("digits"), data.load("digits", split="test")


def _fit(train, model_dir, build=lambda: models.digits_mlp(seed=0), **kwargs):
    arguments = dict(epochs=2, steps_per_epoch=train.steps_per_epoch(BATCH), model_dir=model_dir and str(model_dir),
                     verbose=0)
    compile_args = dict(loss=LOSS, metrics=["accuracy"], steps_per_execution=5,
                        optimizer=lambda: keras.optimizers.Adam(1e-2))
    options = {"export": False}
    for name, value in kwargs.items():  # model.compile's arguments go to compile, FitOptions' fields into options=
        (compile_args if name in _COMPILE else options if name in _OPTION_NAMES else arguments)[name] = value
    return fit(compiled(build, **compile_args), train.dataset_fn(BATCH, seed=1), options=FitOptions(**options),
               **arguments)


def _scalars(logdir):
    tags = set()
    for name in os.listdir(logdir):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(logdir, name)):
            tags.update(value.tag for value in event.summary.value)
    return tags


class _Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_begin(self, logs=None):
        self.calls.append(("train_begin", None))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch, dict(logs)))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("batch_end", batch))


def _evaluator_config():
    ports = [pick_port() for _ in range(2)]
    return TFConfig.from_dict({"cluster": {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]},
                               "task": {"type": "evaluator", "index": 0}})


def test_fit_trains_and_the_chief_writes_every_artifact(digits, tmp_path, capsys):
    train, test = digits
    recorder = _Recorder()
    history = _fit(train, tmp_path, epochs=3, checkpoint=CheckpointConfig(every=20), export=True, verbose=1,
                   validation_fn=test.dataset_fn(BATCH, shuffle=False, repeat=False, drop_remainder=False),
                   callbacks=[recorder])
    assert history.global_step == 66 and history.epoch == [0, 1, 2] and history.role == "chief"
    assert history["loss"][0] > history["loss"][-1]
    assert history.final("val_accuracy") > 0.85
    # Checkpoints every 20 steps and at the end, newest 3 kept.
    manager_files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".index"))
    assert manager_files == ["ckpt-40.index", "ckpt-60.index", "ckpt-66.index"]
    assert json.loads((tmp_path / "training_done.json").read_text()) == {"global_step": 66}
    # TensorBoard: training scalars and validation curves.
    assert {"loss", "accuracy", "steps_per_sec", "examples_per_sec", "learning_rate"} <= _scalars(tmp_path / "train")
    assert {"loss", "accuracy"} <= _scalars(tmp_path / "validation")
    # Exports reload outside the strategy and predict like the trained model.
    x = test.features[:16]
    expected = history.model(x).numpy()
    np.testing.assert_allclose(keras.models.load_model(history.exports["keras"])(x), expected, atol=1e-5)
    served = tf.saved_model.load(history.exports["saved_model"])  # keep a reference while serving
    np.testing.assert_allclose(served.serve(x), expected, atol=1e-5)
    # Keras callbacks got their hooks; the progress bar printed one line per epoch.
    assert recorder.calls[0] == ("train_begin", None)
    epoch_ends = [c for c in recorder.calls if c[0] == "epoch_end"]
    assert [c[1] for c in epoch_ends] == [0, 1, 2] and "val_accuracy" in epoch_ends[-1][2]
    # One batch hook per chunk; chunks end every 5 steps, on checkpoint steps (20, 40, 60) and epoch ends.
    chunk_ends = [5, 10, 15, 20, 22, 27, 32, 37, 40, 44, 49, 54, 59, 60, 65, 66]
    assert sum(c[0] == "batch_end" for c in recorder.calls) == len(chunk_ends)
    out = capsys.readouterr().out
    assert "Epoch 3/3" in out and out.count("22/22") == 3


def test_evaluator_task_evaluates_the_final_checkpoint_and_exits(digits, tmp_path):
    train, test = digits
    trained = _fit(train, tmp_path, epochs=1)
    history = _fit(train, tmp_path, epochs=1, tf_config=_evaluator_config(),
                   validation=ValidationConfig(evaluator_timeout=30),
                   validation_fn=test.dataset_fn(BATCH, shuffle=False, repeat=False, drop_remainder=False))
    assert history.role == "evaluator" and history.epoch == [trained.global_step]
    assert 0.0 < history.final("accuracy") <= 1.0
    assert {"loss", "accuracy"} <= _scalars(tmp_path / "eval")


def test_resume_after_a_crash_matches_an_uninterrupted_run(digits, tmp_path):
    """With dropout and shuffling on: the dropout seed generators' state is in the checkpoint."""
    train, _ = digits
    dropout = lambda: models.digits_mlp(dropout=0.3, seed=0)  # noqa: E731
    reference = _fit(train, tmp_path / "reference", build=dropout)

    class Crash(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.chunks = 0

        def on_train_batch_end(self, batch, logs=None):
            self.chunks += 1
            if self.chunks == 8:  # chunk ends 5,10,15,20,22,27,30,35: crash at 35, checkpoint at 30
                raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(train, tmp_path / "resumed", build=dropout, checkpoint=CheckpointConfig(every=10), callbacks=[Crash()])
    assert tf.train.latest_checkpoint(str(tmp_path / "resumed")).endswith("ckpt-30")
    resumed = _fit(train, tmp_path / "resumed", build=dropout, checkpoint=CheckpointConfig(every=10))
    assert resumed.global_step == reference.global_step == 44
    assert resumed.epoch == [1]  # only the unfinished epoch ran again
    for got, want in zip(resumed.model.get_weights(), reference.model.get_weights(), strict=False):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_steps_per_execution_changes_speed_not_results(digits, tmp_path):
    train, _ = digits
    runs = {spe: _fit(train, tmp_path / str(spe), epochs=1, steps_per_epoch=44, steps_per_execution=spe)
            for spe in (1, 7, 13, 40)}  # above UNROLL_LIMIT (8): a tf.range loop of 8 straight steps, then the rest
    reference = runs[1]
    for spe, history in runs.items():
        assert history.global_step == 44, spe
        assert history["loss"][0] == pytest.approx(reference["loss"][0], rel=1e-6)
        for a, b in zip(history.model.get_weights(), reference.model.get_weights(), strict=False):
            np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_loss_scale_optimizer_trains_as_its_inner_optimizer(digits, tmp_path):
    """The step scales the loss that ``LossScaleOptimizer`` unscales the gradients of (Keras' own step does)."""
    train, _ = digits
    plain = _fit(train, None, epochs=1, steps_per_epoch=6, optimizer=lambda: keras.optimizers.SGD(0.05))
    scaled = _fit(train, None, epochs=1, steps_per_epoch=6,
                  optimizer=lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05)))
    assert scaled.global_step == 6
    for a, b in zip(scaled.model.get_weights(), plain.model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_a_callback_can_stop_training(digits, tmp_path):
    train, _ = digits

    class StopAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = True

    history = _fit(train, tmp_path, epochs=5, callbacks=[StopAfterFirstEpoch()])
    assert history.epoch == [0] and history.stopped_early and history.global_step == 22
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-22")
    assert json.loads((tmp_path / "training_done.json").read_text())["global_step"] == 22


def test_argument_errors_name_the_argument(digits, tmp_path):
    train, _ = digits
    with pytest.raises(TrainingError, match="`loss` is None: compile the model with a loss") as info:
        _fit(train, tmp_path, loss=None)
    assert info.value.field == "loss"
    with pytest.raises(TrainingError, match="which is not compiled. Compile it inside model_fn") as info:
        fit(lambda: models.digits_mlp(seed=0), train.dataset_fn(BATCH), steps_per_epoch=2, model_dir=str(tmp_path))
    assert info.value.field == "model_fn"
    with pytest.raises(TrainingError, match="losses per output") as info:
        _fit(train, tmp_path, loss=[LOSS])
    assert info.value.field == "loss"
    with pytest.raises(TrainingError, match="`validation_fn` is None") as info:
        _fit(train, tmp_path, tf_config=_evaluator_config())
    assert info.value.field == "validation_fn"
    with pytest.raises(TrainingError, match="TF_CONFIG describes a cluster") as info:
        _fit(train, None, tf_config=_evaluator_config())
    assert info.value.field == "model_dir"
    with pytest.raises(TrainingError, match="`epochs` is 0"):
        _fit(train, tmp_path, epochs=0)


def test_keras_callbacks_that_change_the_learning_rate_reach_the_optimizer(digits, tmp_path):
    """ReduceLROnPlateau and LearningRateScheduler read and set ``model.optimizer.learning_rate``."""
    train, _ = digits
    callbacks = [keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.01 * 0.5 ** epoch),
                 keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0)]
    history = _fit(train, tmp_path, callbacks=callbacks)
    # epoch 0: 0.01, plateau -> 0.005; epoch 1: scheduler 0.005, plateau -> 0.0025
    assert float(history.model.optimizer.learning_rate) == pytest.approx(0.0025)


@pytest.mark.parametrize("pruned", ["ckpt-11.*", "ckpt-11.data-*"])  # all of it, or its data before its index
def test_the_evaluator_skips_a_checkpoint_deleted_before_it_is_read(digits, tmp_path, pruned):
    """``CheckpointConfig.keep`` can prune a checkpoint between listing and restoring it: skip it, go on."""
    from toolkit.training import evaluate_continuously

    train, _ = digits
    _fit(train, tmp_path, epochs=1, checkpoint=CheckpointConfig(every=11, keep=5))  # ckpt-11 and ckpt-22
    model, seen = models.digits_mlp(seed=0), []
    checkpoint = tf.train.Checkpoint(model=model)
    (tmp_path / "training_done.json").unlink()
    index = (tmp_path / "checkpoint").read_text()
    (tmp_path / "checkpoint").write_text(index.replace('model_checkpoint_path: "ckpt-22"',
                                                       'model_checkpoint_path: "ckpt-11"'))

    def evaluate(path):
        if path.endswith("ckpt-11"):  # what the chief does meanwhile: save ckpt-22, prune ckpt-11
            for stale in tmp_path.glob(pruned):
                stale.unlink()
            (tmp_path / "checkpoint").write_text(index)
        checkpoint.restore(path).expect_partial()
        seen.append(path)
        return path

    results = evaluate_continuously(str(tmp_path), evaluate, final_step=22, timeout=30, poll_secs=0.05)
    assert [step for step, _ in results] == [22] and seen == [str(tmp_path / "ckpt-22")]


def test_fit_takes_the_metrics_keras_compile_takes_and_stateful_ones_are_exact(digits, tmp_path):
    """The same compile as for Keras' model.fit: AUC and Precision are computed from summed counts."""
    train, test = digits
    binary = [dataclasses.replace(d, labels=(d.labels >= 5).astype(np.int64), num_classes=2) for d in (train, test)]

    def build():
        return keras.Sequential([keras.Input(train.input_shape), keras.layers.Flatten(),
                                 keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dense(1, activation="sigmoid")])

    history = _fit(binary[0], tmp_path, build=build, loss="binary_crossentropy", epochs=1,
                   metrics=["accuracy", keras.metrics.AUC(name="auc"), keras.metrics.Precision(name="precision")],
                   validation_fn=binary[1].dataset_fn(BATCH, shuffle=False, repeat=False, drop_remainder=False))
    x, y = binary[1].features, binary[1].labels
    predictions = history.model.predict(x, verbose=0)
    for metric in (keras.metrics.AUC(), keras.metrics.Precision()):
        metric.update_state(y, predictions)
        name = "val_auc" if isinstance(metric, keras.metrics.AUC) else "val_precision"
        assert history.history[name][-1] == pytest.approx(float(metric.result()), abs=1e-4), name
