"""The engine's set-up exists once: ``toolkit.fit`` and Keras' ``model.fit`` write the same run.

Both front doors hand an ``EngineRun`` to ``toolkit.training.engine.train``; the same model, data,
optimizer and schedule must give the same checkpoints (the same steps, and the last one's variable names
and values), the same validation and the same TensorBoard summaries (tags and values), in one process
under a one-worker MultiWorkerMirroredStrategy (the path a multi-worker job takes). They also run the same
traced step (the same ops) with as many executions and host waits: the Keras door costs nothing per step.
"""
from __future__ import annotations

import collections
import glob

import keras
import numpy as np
import pytest
import tensorflow as tf
from _models import compiled

import toolkit
from toolkit.training import CheckpointConfig, FitOptions

STEPS, EPOCHS = 4, 2
_RNG = np.random.RandomState(1)
_X = _RNG.normal(size=(64, 6)).astype("float32")
_Y = (_X @ _RNG.normal(size=(6, 1))).astype("float32")


def _model():
    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])


def _dataset_fn(context=None):
    return tf.data.Dataset.from_tensor_slices((_X, _Y)).repeat().batch(16)


def _validation_fn(context=None):
    return tf.data.Dataset.from_tensor_slices((_X[:32], _Y[:32])).batch(16)


class _CheckpointSteps(keras.callbacks.Callback):
    """The newest checkpoint in ``directory`` after each execution (the engine saves before callbacks run)."""

    def __init__(self, directory):
        super().__init__()
        self.directory, self.seen = str(directory), []

    def on_train_batch_end(self, batch, logs=None):
        path = tf.train.latest_checkpoint(self.directory)
        self.seen.append(None if path is None else int(path.rsplit("-", 1)[1]))


def _checkpoint(directory):
    path = tf.train.latest_checkpoint(str(directory))
    assert path is not None, f"no checkpoint in {directory}"
    reader = tf.train.load_checkpoint(path)
    names = {name for name in reader.get_variable_to_shape_map()
             if "save_counter" not in name and name != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    return {name: reader.get_tensor(name) for name in names}


def _summaries(logdir):
    values: dict[str, list[float]] = {}
    for path in sorted(glob.glob(f"{logdir}/**/events.out.tfevents.*", recursive=True)):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag.startswith("epoch_"):
                    where = path.split("/")[-2]  # train/ or validation/
                    values.setdefault(f"{where}/{value.tag}", []).append(float(tf.make_ndarray(value.tensor)))
    return values


def _watch_executions(monkeypatch) -> tuple[dict[str, list], collections.Counter, dict[str, str]]:
    """Records, per front door, each execution's traced function and each host wait of the runner."""
    from toolkit.training import runners

    calls: dict[str, list] = {"fit": [], "keras": []}
    waits: collections.Counter = collections.Counter()
    door = {"now": "fit"}
    call, wait = runners.SyncRunner._call, runners.SyncRunner.wait

    def watched_call(self, num_steps):
        function, args = call(self, num_steps)
        calls[door["now"]].append((function, args))
        return function, args

    def watched_wait(self):
        waits[door["now"]] += 1
        return wait(self)

    monkeypatch.setattr(runners.SyncRunner, "_call", watched_call)
    monkeypatch.setattr(runners.SyncRunner, "wait", watched_wait)
    return calls, waits, door


def _op_counts(function, args) -> collections.Counter:
    """The op types of a traced execution, its nested functions' included."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    counts = collections.Counter(node.op for node in graph.node)
    functions = getattr(graph, "library").function  # noqa: B009 - the GraphDef's function library
    for nested in functions:
        counts.update(node.op for node in nested.node_def)
    return counts


@pytest.fixture(scope="module")
def strategy():
    return tf.distribute.MultiWorkerMirroredStrategy()


def test_fit_and_model_fit_write_the_same_checkpoints_and_summaries(strategy, tmp_path, monkeypatch):
    calls, waits, door = _watch_executions(monkeypatch)
    fit_steps, keras_steps = _CheckpointSteps(tmp_path / "fit"), _CheckpointSteps(tmp_path / "keras")
    model_fn = compiled(_model, optimizer=lambda: keras.optimizers.SGD(0.05), loss="mse", metrics=(),
                        steps_per_execution=2)
    fitted = toolkit.fit(model_fn, _dataset_fn, epochs=EPOCHS, steps_per_epoch=STEPS, strategy=strategy,
                         validation_fn=_validation_fn, model_dir=str(tmp_path / "fit"), verbose=0,
                         callbacks=[fit_steps, keras.callbacks.TensorBoard(str(tmp_path / "fit-tb"))],
                         options=FitOptions(checkpoint=CheckpointConfig(every=2, keep=1), export=False))
    door["now"] = "keras"
    toolkit.enable_distributed_keras()
    try:
        with strategy.scope():
            model = _model()
            model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", steps_per_execution=2)
        history = model.fit(_dataset_fn, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0,
                            validation_data=_validation_fn(), callbacks=[
            keras.callbacks.BackupAndRestore(str(tmp_path / "keras"), save_freq=2, delete_checkpoint=False),
            keras_steps, keras.callbacks.TensorBoard(str(tmp_path / "keras-tb"))])
    finally:
        toolkit.disable_distributed_keras()

    assert fitted.global_step == EPOCHS * STEPS and history.epoch == list(range(EPOCHS))
    np.testing.assert_allclose(history.history["loss"], fitted.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(history.history["val_loss"], fitted.history["val_loss"], rtol=1e-5)
    assert fit_steps.seen == keras_steps.seen == list(range(2, EPOCHS * STEPS + 1, 2))  # the same checkpoint steps
    by_fit, by_keras = _checkpoint(tmp_path / "fit"), _checkpoint(tmp_path / "keras")
    assert sorted(by_fit) == sorted(by_keras) and len(by_fit) > 4
    step = next(name for name in by_fit if name.startswith("global_step"))
    assert int(by_fit[step]) == int(by_keras[step]) == EPOCHS * STEPS
    for name in by_fit:
        np.testing.assert_allclose(by_keras[name], by_fit[name], rtol=1e-5, atol=1e-6, err_msg=name)
    fit_summaries, keras_summaries = _summaries(tmp_path / "fit-tb"), _summaries(tmp_path / "keras-tb")
    assert "train/epoch_loss" in fit_summaries and "validation/epoch_loss" in fit_summaries
    assert sorted(fit_summaries) == sorted(keras_summaries)
    for tag, values in fit_summaries.items():
        np.testing.assert_allclose(keras_summaries[tag], values, rtol=1e-5, err_msg=tag)

    # and the Keras door adds no work to a step, and no execution or host wait to an epoch
    assert len(calls["fit"]) == len(calls["keras"]) == EPOCHS * STEPS // 2  # one call per execution
    assert waits["fit"] == waits["keras"] > 0
    ops_fit, ops_keras = _op_counts(*calls["fit"][-1]), _op_counts(*calls["keras"][-1])
    assert sum(ops_fit.values()) > 50 and ops_keras == ops_fit
