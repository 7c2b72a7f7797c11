"""Baseline estimators, head-based canned estimators, and canned estimators trained by any Keras optimizer."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator import (
    BaselineClassifier,
    BaselineEstimator,
    BaselineRegressor,
    DNNEstimator,
    DNNLinearCombinedEstimator,
    LinearEstimator,
    PoissonRegressionHead,
    RegressionHead,
    RunConfig,
)
from toolkit.estimator.canned import CannedError

fc = tf.feature_column
X = fc.numeric_column("x")


@pytest.fixture
def config(tmp_path):
    return RunConfig(model_dir=str(tmp_path / "model"), save_checkpoints_steps=1000, log_step_count_steps=1000,
                     save_summary_steps=1000, tf_random_seed=1)


def _line(batch=8):
    """y = 2x + 1 on x in [0, 1]."""
    x = np.linspace(0, 1, 16, dtype=np.float32)[:, None]
    return tf.data.Dataset.from_tensor_slices(({"x": x}, 2 * x + 1)).repeat().batch(batch)


def _serving():
    from toolkit.estimator.export import build_raw_serving_input_receiver_fn
    return build_raw_serving_input_receiver_fn({"x": tf.constant([[0.5]])})


def test_baseline_classifier_learns_the_class_prior_and_exports(config, tmp_path):
    labels = np.array([[0], [1], [1], [1]] * 2)

    def input_fn():
        return tf.data.Dataset.from_tensor_slices(({"x": np.zeros((8, 1), np.float32)}, labels)).repeat().batch(4)

    est = BaselineClassifier(config=config, optimizer="SGD")
    est.train(input_fn, steps=150)
    # the bias converges to log(p / (1 - p)) with p = 3/4: log 3
    assert est.get_variable_value("baseline/bias")[0] == pytest.approx(math.log(3), abs=0.05)
    metrics = est.evaluate(input_fn, steps=2)
    assert metrics["accuracy"] == pytest.approx(0.75) and metrics["global_step"] == 150
    path = est.export_saved_model(str(tmp_path / "export"), _serving())
    assert {"serving_default", "classification", "predict"} <= set(tf.saved_model.load(path).signatures)


def test_baseline_regressor_and_estimator_learn_the_label_mean(config):
    def input_fn():
        return {"x": tf.zeros((2, 1))}, tf.constant([[3.0], [5.0]])

    est = BaselineRegressor(config=config, optimizer="SGD")
    est.train(input_fn, steps=60)
    assert est.get_variable_value("baseline/bias")[0] == pytest.approx(4.0, abs=1e-3)
    assert est.evaluate(input_fn, steps=1)["average_loss"] == pytest.approx(1.0, abs=1e-3)
    poisson = BaselineEstimator(PoissonRegressionHead(), config=config.replace(model_dir=config.model_dir + "2"),
                                optimizer="SGD")
    poisson.train(input_fn, steps=100)
    # the Poisson rate exp(bias) converges to the label mean
    assert math.exp(poisson.get_variable_value("baseline/bias")[0]) == pytest.approx(4.0, rel=0.02)


@pytest.mark.parametrize("build", [
    lambda c: DNNEstimator(RegressionHead(), hidden_units=[8], feature_columns=[X],
                           optimizer=tf.compat.v1.train.AdamOptimizer(0.05), config=c),
    lambda c: LinearEstimator(RegressionHead(), feature_columns=[X], optimizer="SGD", config=c),
    lambda c: DNNLinearCombinedEstimator(RegressionHead(), linear_feature_columns=[X], dnn_feature_columns=[X],
                                         dnn_hidden_units=[4],
                                         linear_optimizer=tf.compat.v1.train.GradientDescentOptimizer(0.3), config=c),
], ids=["dnn", "linear", "combined"])
def test_head_based_estimators_learn_a_line_and_export(build, config, tmp_path):
    est = build(config)
    est.train(_line, steps=300)
    loss = est.evaluate(_line, steps=2)["average_loss"]
    assert loss < 0.1, loss   # the labels' variance is about 0.36: the model has learned the line
    path = est.export_saved_model(str(tmp_path / "export"), _serving())
    served = tf.saved_model.load(path).signatures["predict"](x=tf.constant([[0.5]]))
    assert served["predictions"].numpy()[0, 0] == pytest.approx(2.0, abs=0.3)   # 2 * 0.5 + 1


def test_canned_estimators_train_with_keras_optimizers_of_any_class(config):
    import keras
    import tf_keras

    from toolkit.estimator import DNNRegressor

    class Counting(tf_keras.optimizers.legacy.SGD):
        """A user's own Keras 2 optimizer: trained through its get_updates, its iterations the global step."""
        calls = 0

        def get_updates(self, loss, params):
            Counting.calls += 1
            return super().get_updates(loss, params)

    counting = Counting(0.1)
    for i, optimizer in enumerate([keras.optimizers.Nadam(0.05), tf_keras.optimizers.legacy.Adamax(0.1), counting]):
        est = DNNRegressor([4], [X], optimizer=optimizer, config=config.replace(model_dir=f"{config.model_dir}{i}"))
        est.train(_line, steps=5)
        est.train(_line, steps=5)   # a second graph: the optimizer is rebuilt from its config
        assert est.get_variable_value("global_step") == 10
    assert Counting.calls == 2
    assert counting.iterations.name == "global_step:0"   # as in TF: the caller's optimizer counts the global step
    with pytest.raises(CannedError, match="is the Keras optimizer Lion, which has no TF1 graph counterpart"):
        DNNRegressor([4], [X], optimizer=keras.optimizers.Lion())


def test_a_head_based_estimator_refuses_what_is_not_a_head():
    with pytest.raises(CannedError, match="`head` is str 'regression'; expected a head") as err:
        DNNEstimator("regression", hidden_units=[4], feature_columns=[X])
    assert err.value.field == "head"
