"""``toolkit.enable_distributed_keras``: Keras' own compile/fit/evaluate/predict on the engine.

A one-worker MultiWorkerMirroredStrategy (no TF_CONFIG) takes the same path as a
real multi-worker job, so these tests run in-process; the examples' cluster
tests cover two workers and parameter servers.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import roc_auc_score

import toolkit
from toolkit._compat import keras as _compat
from toolkit.keras_dist._inputs import training_input
from toolkit.training import SummedMetric, TrainingError
from toolkit.training.metrics import AUCSums, ConfusionSums, MeanIoUSums

_RNG = np.random.RandomState(0)
_X = _RNG.normal(size=(256, 8)).astype("float32")
_Y = keras.utils.to_categorical((_X[:, 0] + 0.5 * _X[:, 1] > 0).astype(int) + (_X[:, 2] > 1).astype(int), 3)


@pytest.fixture(scope="module")
def strategy():
    return tf.distribute.MultiWorkerMirroredStrategy()


@pytest.fixture
def enabled():
    toolkit.enable_distributed_keras()
    yield
    toolkit.disable_distributed_keras()


def _model(seed=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(3, activation="softmax")])


def _compile(model, **kwargs):
    args = dict(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy",
                metrics=["accuracy", keras.metrics.AUC(name="auc"), keras.metrics.Precision(name="precision"),
                         keras.metrics.Recall(name="recall"), keras.metrics.OneHotMeanIoU(3, name="iou")])
    args.update(kwargs)
    model.compile(**args)
    return model


def _dataset(weights=None):
    parts = (_X, _Y) if weights is None else (_X, _Y, weights)
    return tf.data.Dataset.from_tensor_slices(parts).batch(32)


def test_importing_toolkit_changes_nothing_and_enable_is_idempotent():
    before = {name: getattr(keras.Model, name) for name in _compat.PATCHED_METHODS}
    assert not toolkit.keras_dist.distributed_keras_enabled()
    toolkit.enable_distributed_keras()
    patched = keras.Model.fit
    toolkit.enable_distributed_keras()
    assert keras.Model.fit is patched and patched is not before["fit"]
    toolkit.disable_distributed_keras()
    toolkit.disable_distributed_keras()
    assert {name: getattr(keras.Model, name) for name in _compat.PATCHED_METHODS} == before


def test_keras_internals_used_behind_the_fence_still_exist():
    assert _compat.missing_symbols() == [], "Keras removed symbols that toolkit._compat.keras uses"


def test_fit_matches_keras_with_sample_weights_and_exact_stateful_metrics(strategy, enabled):
    weights = np.linspace(0.5, 1.5, len(_X)).astype("float32")
    reference = _compile(_model(), weighted_metrics=["accuracy"])  # no strategy: Keras' own fit
    want = reference.fit(_dataset(weights), epochs=2, verbose=0)
    assert hasattr(reference, "train_function")  # Keras' own loop ran
    with strategy.scope():
        model = _compile(_model(), weighted_metrics=["accuracy"])
    got = model.fit(_dataset(weights), epochs=2, verbose=0, validation_data=(_X, _Y))
    assert not getattr(model, "train_function", None)  # the engine ran, not Keras' loop
    assert got.epoch == [0, 1]
    assert set(want.history) | {f"val_{k}" for k in want.history} == set(got.history)
    for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=1e-4)
    # Per-epoch training metrics: means over the epoch's batches as the weights move, like Keras.
    for name in ("accuracy", "weighted_accuracy", "auc", "precision", "recall", "iou"):
        np.testing.assert_allclose(got.history[name][-1], want.history[name][-1], atol=2e-3, err_msg=name)
    logs = model.evaluate(_X, _Y, verbose=0, return_dict=True)
    keras_logs = reference.evaluate(_X, _Y, verbose=0, return_dict=True)
    for name, value in keras_logs.items():
        assert logs[name] == pytest.approx(value, abs=1e-5), name
    assert logs == pytest.approx({k[len("val_"):]: v[-1] for k, v in got.history.items() if k.startswith("val_")})
    predictions = model.predict(_X, verbose=0)
    np.testing.assert_allclose(predictions, reference.predict(_X, verbose=0), atol=1e-5)
    assert logs["auc"] == pytest.approx(roc_auc_score(_Y.ravel(), predictions.ravel()), abs=2e-3)


# A schedule follows the global step, which counts whole executions: with steps_per_execution=1 it
# moves every step, as Keras' optimizer.iterations does.
@pytest.mark.parametrize("optimizer,steps_per_execution", [
    (lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)), 3),
    (lambda: keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.2, 4, 0.5)), 1),
], ids=["loss_scale", "schedule"])
def test_fit_matches_keras_with_loss_scaling_schedules_and_xla(strategy, enabled, optimizer, steps_per_execution):
    reference = _compile(_model(), optimizer=optimizer(), metrics=[])
    reference.fit(_dataset(), epochs=2, verbose=0)
    with strategy.scope():
        model = _compile(_model(), optimizer=optimizer(), metrics=[], jit_compile=True,
                         steps_per_execution=steps_per_execution)
    model.fit(_dataset(), epochs=2, verbose=0)
    for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_numpy_input_with_class_weight_and_rank_one_labels_matches_keras(strategy, enabled, tmp_path):
    labels = (_X[:, 0] > 0).astype("float32")  # shape [batch] against predictions [batch, 1]

    def build():
        keras.utils.set_random_seed(5)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
        return model

    reference = build()
    want = reference.fit(_X, labels, batch_size=32, epochs=2, shuffle=False, class_weight={0: 1.0, 1: 3.0}, verbose=0)
    with strategy.scope():
        model = build()
    csv = tmp_path / "log.csv"
    got = model.fit(_X, labels, batch_size=32, epochs=2, shuffle=False, class_weight={0: 1.0, 1: 3.0}, verbose=0,
                    callbacks=[keras.callbacks.CSVLogger(str(csv))])
    for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(got.history["accuracy"], want.history["accuracy"], atol=1e-6)
    assert csv.read_text().splitlines()[0].startswith("epoch,accuracy,loss")


def test_callbacks_early_stopping_learning_rate_and_backup_restore(strategy, enabled, tmp_path):
    backup = str(tmp_path / "backup")

    class Crash(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("crash after epoch 2")

    def build():
        with strategy.scope():
            return _compile(_model(), optimizer=keras.optimizers.SGD(0.1), metrics=[])

    schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 / (epoch + 1))
    with pytest.raises(RuntimeError, match="crash after epoch 2"):
        build().fit(_dataset(), epochs=4, verbose=0, callbacks=[keras.callbacks.BackupAndRestore(backup), Crash()])
    assert tf.train.latest_checkpoint(backup).endswith("ckpt-16")  # 8 steps per epoch, saved after epoch 2
    model = build()
    history = model.fit(_dataset(), epochs=4, verbose=0,
                        callbacks=[keras.callbacks.BackupAndRestore(backup), schedule])
    assert history.epoch == [2, 3]  # resumed after the last backed-up epoch
    assert not tf.io.gfile.exists(backup)  # deleted after the run ended normally
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.1 / 4)
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    history = model.fit(_dataset(), epochs=5, verbose=0, callbacks=[stop])
    assert history.epoch == [0, 1]


def test_outside_the_multi_worker_strategies_keras_runs_its_own_code(enabled):
    # (No strategy at all: the references of the tests above are Keras' own fit with this enabled.)
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        mirrored = _compile(_model(), metrics=[keras.metrics.F1Score()])  # a metric the engine would refuse
    mirrored.fit(_X[:64], _Y[:64], batch_size=64, epochs=1, verbose=0)
    assert hasattr(mirrored, "train_function")


def test_bad_input_gets_errors_that_say_what_to_change(strategy, enabled):
    with strategy.scope(), pytest.raises(TrainingError,
                                         match=r"F1Score 'f1_score', a stateful metric the engine cannot aggregate"):
        _compile(_model(), metrics=[keras.metrics.F1Score()])
    with strategy.scope(), pytest.raises(TrainingError, match=r"the SummedMetric 'summed_metric', which toolkit.fit"):
        _compile(_model(), metrics=[SummedMetric()])  # model.fit would hand it Keras' packed labels
    outside = _model()
    with strategy.scope(), pytest.raises(TrainingError, match=r"built outside strategy.scope\(\).*Create \(and build"):
        _compile(outside)
    with strategy.scope():
        model = _compile(_model())
    with pytest.raises(TrainingError, match=r"has 8 batches but fit needs 30.*must be repeated. Add .repeat\(\)"):
        model.fit(_dataset(), epochs=3, steps_per_epoch=10, verbose=0)
    with pytest.raises(TrainingError, match=r"steps_per_epoch` is None but the dataset is repeated"):
        model.fit(_dataset().repeat(), epochs=1, verbose=0)
    toolkit.disable_distributed_keras()
    with strategy.scope():
        early = _compile(_model())  # compiled before enable: Keras alone
    toolkit.enable_distributed_keras()
    with pytest.raises(TrainingError, match=r"not compiled inside that strategy's scope after "
                                            r"toolkit.enable_distributed_keras\(\)"):
        early.fit(_dataset(), epochs=1, verbose=0)


def test_a_model_without_input_is_built_on_the_first_batch_and_history_is_set(strategy, enabled):
    keras.utils.set_random_seed(5)
    with strategy.scope():
        lazy = _compile(keras.Sequential([keras.layers.Dense(16, activation="relu"),
                                          keras.layers.Dense(3, activation="softmax")]), metrics=["accuracy"])
    assert not lazy.weights
    history = lazy.fit(_dataset().repeat(), epochs=2, steps_per_epoch=8, verbose=0)
    assert [tuple(w.shape) for w in lazy.weights] == [(8, 16), (16,), (16, 3), (3,)]
    assert all(strategy.extended.variable_created_in_scope(w.value) for w in lazy.weights)
    assert lazy.history is history and len(history.history["loss"]) == 2
    assert history.history["loss"][1] < history.history["loss"][0]


def test_parameter_server_input_rules():
    with pytest.raises(TrainingError, match=r"`steps_per_epoch` is None, but under ParameterServerStrategy"):
        training_input(lambda ctx: _dataset().repeat(), kind="parameter_server", workers=2)
    with pytest.raises(TrainingError, match=r"`steps_per_epoch` is None, but under ParameterServerStrategy"):
        training_input(_dataset().repeat(), kind="parameter_server", workers=2)
    with pytest.raises(TrainingError, match=r"has 8 batches and ends.*Add .repeat\(\) at the end"):
        training_input(lambda ctx: _dataset(), kind="parameter_server", workers=2, steps_per_epoch=5)
    with pytest.raises(TrainingError, match=r"dataset of 8 batches that ends.*Add .repeat\(\) to it"):
        training_input(_dataset(), kind="parameter_server", workers=2, steps_per_epoch=5)


def test_a_dataset_under_parameter_servers_is_rebuilt_per_worker_from_its_graph():
    # What ClusterCoordinator.create_per_worker_dataset does with a dataset: its graph travels, not its tensors.
    numbered = tf.data.Dataset.range(10).map(lambda i: (tf.fill([2], i), i)).repeat()
    source = training_input(numbered, kind="parameter_server", workers=2, steps_per_epoch=4)
    assert source.steps_per_epoch == 4 and not isinstance(source.source, tf.data.Dataset)
    second = source.source(tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1))
    assert [int(label) for _, label in second.take(6)] == [1, 3, 5, 7, 9, 1]
    alone = source.source(tf.distribute.InputContext())
    assert [int(label) for _, label in alone.take(3)] == [0, 1, 2]


def _added(summed, labels, predictions, weights, pieces=3):
    """Sums over shards (as workers would compute them), added, then turned into the value."""
    totals = sum(summed.sums((tf.constant(y), tf.constant(w)), tf.constant(p)).numpy()
                 for y, p, w in zip(np.array_split(labels, pieces), np.array_split(predictions, pieces),
                                    np.array_split(weights, pieces), strict=False))
    return summed.result(totals)


@pytest.mark.parametrize("make", [lambda: keras.metrics.AUC(), lambda: keras.metrics.AUC(curve="PR"),
                                  lambda: keras.metrics.AUC(summation_method="minoring"),
                                  lambda: keras.metrics.Precision(), lambda: keras.metrics.Recall(thresholds=0.3)])
def test_summed_metrics_equal_keras_over_the_whole_data(make):
    labels = (_RNG.uniform(size=(300, 1)) > 0.6).astype("float32")
    predictions = np.clip(labels * 0.3 + _RNG.uniform(size=(300, 1)) * 0.7, 0, 1).astype("float32")
    weights = _RNG.uniform(0.2, 2.0, size=300).astype("float32")
    metric = make()
    summed = (AUCSums if isinstance(metric, keras.metrics.AUC) else ConfusionSums)(metric, weighted=True)
    metric.update_state(labels, predictions, sample_weight=weights)
    assert _added(summed, labels, predictions, weights) == pytest.approx(float(metric.result()), abs=1e-5)
    if isinstance(metric, keras.metrics.AUC) and (metric.curve.name, metric.summation_method.name) == (
            "ROC", "INTERPOLATION"):
        exact = roc_auc_score(labels.ravel(), predictions.ravel(), sample_weight=weights)
        assert _added(summed, labels, predictions, weights) == pytest.approx(exact, abs=2e-3)


def test_mean_iou_sums_equal_keras():
    labels = _RNG.randint(0, 4, size=(120,))
    predictions = _RNG.uniform(size=(120, 4)).astype("float32")
    metric = keras.metrics.MeanIoU(num_classes=4, sparse_y_pred=False)
    metric.update_state(labels, predictions)
    summed = MeanIoUSums(metric, weighted=False)
    added = _added(summed, labels, predictions, np.ones(120, "float32"))
    assert added == pytest.approx(float(metric.result()), abs=1e-6)
