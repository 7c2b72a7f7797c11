"""experimental.LinearSDCA: the linear estimators trained by stochastic dual coordinate ascent."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("tf_keras")  # the optional `estimator` extra

from toolkit.estimator import BinaryClassHead, LinearClassifier, LinearEstimator, LinearRegressor, RunConfig
from toolkit.estimator.canned import CannedError
from toolkit.estimator.experimental import LinearSDCA

fc = tf.feature_column
N = 120


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    return RunConfig(model_dir=str(tmp_path / "model"), tf_random_seed=1, tf_config={})


def _data(seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(N).astype("float32")
    noise = rng.randn(N).astype("float32")
    city = rng.choice(["a", "b", "c"], N)
    return x, noise, city


def _columns(*extra):
    return [fc.numeric_column("x"), fc.categorical_column_with_vocabulary_list("city", ["a", "b", "c"]), *extra]


def _input_fn(features, labels, *, repeat):
    def input_fn():
        ds = tf.data.Dataset.from_tensor_slices((features, labels))
        return (ds.repeat() if repeat else ds).batch(40)
    return input_fn


def test_regressor_recovers_the_linear_function_with_a_sharded_state_table(config):
    x, _, city = _data()
    y = (2.0 * x + 3.0 * (city == "b") + 1.0).astype("float32")
    features = {"x": x, "city": city, "example_id": np.arange(N)}  # integer ids are turned into strings
    sdca = LinearSDCA("example_id", num_table_shards=2, symmetric_l2_regularization=0.01)
    est = LinearRegressor(_columns(), config=config, optimizer=sdca)
    est.train(_input_fn(features, y, repeat=True), steps=30)
    est.train(_input_fn(features, y, repeat=True), steps=30)   # resumed: weights, slots and example state restored

    metrics = est.evaluate(_input_fn(features, y, repeat=False))
    assert metrics["global_step"] == 60
    assert metrics["average_loss"] < 1e-3
    weights = est.get_variable_value("linear/linear_model/x/weights").ravel()
    city_w = est.get_variable_value("linear/linear_model/city/weights").ravel()
    bias = est.get_variable_value("linear/linear_model/bias_weights").ravel()
    assert weights == pytest.approx([2.0], abs=0.02)
    # a one-hot column and the bias share one degree of freedom: their sums are what is determined
    assert (bias + city_w).tolist() == pytest.approx([1.0, 4.0, 1.0], abs=0.05)
    # the solver's own slots and its per-example state (both shards) are saved with the model
    assert "linear/linear_model/x/weights_unshrunk" in est.get_variable_names()
    saved = [name for name, _ in tf.train.list_variables(config.model_dir)]
    assert sum(name.startswith("sdca_example_state_") and name.endswith("-keys") for name in saved) == 2, saved


def test_classifier_separates_the_classes_and_l1_zeroes_a_useless_feature(config):
    x, noise, city = _data(1)
    y = ((x + 2.0 * (city == "a") - 0.5) > 0).astype("int64")
    ids = np.array([f"row-{i}" for i in range(N)])
    features = {"x": x, "noise": noise, "city": city, "example_id": ids}
    sdca = LinearSDCA("example_id", symmetric_l1_regularization=2.0, symmetric_l2_regularization=2.0)
    est = LinearClassifier(_columns(fc.numeric_column("noise")), config=config, optimizer=sdca)
    est.train(_input_fn(features, y, repeat=True), steps=40)

    metrics = est.evaluate(_input_fn(features, y, repeat=False))
    assert metrics["accuracy"] >= 0.9
    assert est.get_variable_value("linear/linear_model/x/weights").ravel()[0] > 0.5
    # the L1 proximal step (shrinkage l1/l2 = 1.0) sets the pure-noise weight to exactly zero
    assert est.get_variable_value("linear/linear_model/noise/weights").ravel()[0] == 0.0
    predictions = list(est.predict(_input_fn(features, y, repeat=False)))
    assert len(predictions) == N and set(predictions[0]) >= {"logistic", "class_ids"}


def test_linear_estimator_with_a_binary_head_trains_by_sdca(config):
    x, _, city = _data(2)
    y = (x > 0).astype("float32").reshape(-1, 1)
    features = {"x": x, "city": city, "example_id": np.arange(N)}
    est = LinearEstimator(BinaryClassHead(), _columns(), config=config,
                          optimizer=LinearSDCA("example_id", symmetric_l2_regularization=1.5))
    est.train(_input_fn(features, y, repeat=True), steps=30)
    assert est.evaluate(_input_fn(features, y, repeat=False))["accuracy"] >= 0.9


def test_missing_example_ids_name_the_column(config):
    x, _, city = _data()
    est = LinearRegressor(_columns(), config=config, optimizer=LinearSDCA("row_id", symmetric_l2_regularization=2.0))
    with pytest.raises(CannedError, match="`example_id_column` is 'row_id' but the features have no such key"):
        est.train(_input_fn({"x": x, "city": city}, x, repeat=True), steps=1)


@pytest.mark.parametrize("build,field,text", [
    (lambda s: LinearClassifier(_columns(), n_classes=3, optimizer=s), "optimizer", "multi-class"),
    (lambda s: LinearRegressor(_columns(), label_dimension=2, optimizer=s), "optimizer", "one-dimensional"),
    (lambda s: LinearClassifier(_columns(), optimizer=s, sparse_combiner="mean"), "sparse_combiner",
     'sparse_combiner must be "sum"'),
    (lambda s: LinearRegressor([fc.embedding_column(fc.categorical_column_with_identity("c", 4), 2)],
                               optimizer=s), "feature_columns", "does not support column type"),
])
def test_what_sdca_cannot_train_is_refused_at_construction(build, field, text):
    with pytest.raises(CannedError, match=text) as info:
        build(LinearSDCA("example_id", symmetric_l2_regularization=2.0))
    assert info.value.field == field
    assert isinstance(info.value, ValueError)  # as TF's


@pytest.mark.parametrize("kwargs,field", [
    ({"symmetric_l2_regularization": 0.0}, "symmetric_l2_regularization"),
    ({"symmetric_l1_regularization": -1.0}, "symmetric_l1_regularization"),
    ({"num_loss_partitions": 0}, "num_loss_partitions"),
    ({"num_table_shards": 0}, "num_table_shards"),
    ({"adaptive": "yes"}, "adaptive"),
])
def test_bad_sdca_arguments_name_the_argument(kwargs, field):
    with pytest.raises(CannedError, match=f"LinearSDCA `{field}` is") as info:
        LinearSDCA("example_id", **kwargs)
    assert info.value.field == field


def test_sdca_keeps_tf_s_constructor_defaults():
    sdca = LinearSDCA("example_id")
    assert (sdca.num_loss_partitions, sdca.num_table_shards, sdca.symmetric_l1_regularization,
            sdca.symmetric_l2_regularization, sdca.adaptive) == (1, None, 0.0, 1.0, False)
