"""Estimator, EstimatorSpec and the specs: error cases, and a local train/evaluate/predict/export run."""
from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator import (Estimator, EstimatorError, EstimatorSpec, EvalSpec, ModeKeys, RunConfig, SpecError,
                               TrainSpec, train_and_evaluate)
from toolkit.estimator.training import role_of

_RNG = np.random.default_rng(0)
_X = _RNG.normal(size=(256, 4)).astype(np.float32)
_Y = (_X[:, 0] + _X[:, 1] > 0).astype(np.int64)


def model_fn(features, labels, mode, params):
    hidden = keras.layers.Dense(8, activation="relu")(features)
    logits = keras.layers.Dense(2)(hidden)
    predictions = {"classes": keras.ops.argmax(logits, axis=-1), "logits": logits}
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions=predictions)
    loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return EstimatorSpec(mode, predictions=predictions, loss=loss,
                         optimizer=keras.optimizers.Adam(params["lr"]),
                         eval_metric_ops={"accuracy": keras.metrics.sparse_categorical_accuracy(labels, logits)})


def train_fn():
    return tf.data.Dataset.from_tensor_slices((_X, _Y)).repeat().batch(32)


def eval_fn():
    return tf.data.Dataset.from_tensor_slices((_X, _Y)).batch(64)


def _estimator(tmp_path, **config):
    return Estimator(model_fn, model_dir=str(tmp_path / "model"), params={"lr": 0.05},
                     config=RunConfig(tf_config={}, save_checkpoints_steps=20, **config))


def test_train_evaluate_predict_export_locally(tmp_path):
    est = _estimator(tmp_path)
    est.train(train_fn, max_steps=40)
    assert est.latest_checkpoint().endswith("ckpt-40")
    first = est.evaluate(eval_fn)
    assert first["global_step"] == 40 and set(first) == {"loss", "accuracy", "global_step"}
    est.train(train_fn, steps=60)  # 60 more than the checkpoint's global step
    metrics = est.evaluate(eval_fn)
    assert metrics["global_step"] == 100 and metrics["accuracy"] > 0.8 and metrics["loss"] < first["loss"]
    predictions = list(est.predict(eval_fn))
    assert len(predictions) == 256 and set(predictions[0]) == {"classes", "logits"}
    classes = np.array([p["classes"] for p in predictions])
    assert np.mean(classes == _Y) == pytest.approx(metrics["accuracy"], abs=1e-6)
    export = est.export_saved_model(tmp_path / "export")
    loaded = tf.saved_model.load(export)
    served = loaded.serve(tf.constant(_X[:3]))
    np.testing.assert_array_equal(served["classes"].numpy(), classes[:3])


def test_train_and_evaluate_locally_returns_metrics_and_exports(tmp_path):
    est = _estimator(tmp_path)
    metrics, exports = train_and_evaluate(est, TrainSpec(train_fn, max_steps=30), EvalSpec(eval_fn, steps=2))
    assert metrics["global_step"] == 30 and "accuracy" in metrics
    assert len(exports) == 1 and os.path.exists(os.path.join(exports[0], "saved_model.pb"))


@pytest.mark.parametrize("doc,role", [
    ({}, "local"),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "task": {"type": "ps", "index": 0}}, "server"),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "task": {"type": "worker", "index": 0}},
     "server"),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "task": {"type": "chief", "index": 0}},
     "chief"),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "worker", "index": 0}}, "worker"),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "evaluator", "index": 0}}, "evaluator"),
])
def test_roles(doc, role):
    assert role_of(RunConfig(tf_config=doc)) == role


def test_evaluate_without_checkpoint_says_train_first(tmp_path):
    with pytest.raises(EstimatorError, match="holds no checkpoint. Call train\\(\\) first"):
        _estimator(tmp_path).evaluate(eval_fn)


@pytest.mark.parametrize("kwargs,text", [({}, "exactly one of `steps` and `max_steps`"),
                                         ({"steps": 1, "max_steps": 2}, "exactly one"),
                                         ({"max_steps": 0}, "`max_steps` is 0")])
def test_train_step_arguments(tmp_path, kwargs, text):
    with pytest.raises(EstimatorError, match=text):
        _estimator(tmp_path).train(train_fn, **kwargs)


def test_sync_replicas_without_parameter_servers_is_refused_rather_than_ignored(tmp_path):
    from toolkit.training import TrainingError

    est = Estimator(model_fn, model_dir=str(tmp_path), params={"lr": 0.1}, config=RunConfig(
        tf_config={}, sync_replicas=True))
    with pytest.raises(TrainingError, match="`sync_replicas` is True but the strategy is _DefaultDistributionStrategy"
                                            r" \('sync'\); .* only strategy='parameter_server'") as info:
        est.train(train_fn, max_steps=1)
    assert info.value.field == "sync_replicas"
    assert est.latest_checkpoint() is None  # refused before training a single step


def test_model_fn_must_build_the_same_layers_in_every_mode(tmp_path):
    est = _estimator(tmp_path)
    est.train(train_fn, max_steps=2)

    def other_fn(features, labels, mode, params):
        if mode == ModeKeys.EVAL:
            logits = keras.layers.Dense(2)(features)  # a different network than the one trained
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            return EstimatorSpec(mode, loss=loss)
        return model_fn(features, labels, mode, params)

    est.model_fn = other_fn
    with pytest.raises(EstimatorError, match="same layers, in the same order"):
        est.evaluate(eval_fn)


def test_estimator_arguments():
    with pytest.raises(EstimatorError, match="`model_fn` is int"):
        Estimator(3)
    with pytest.raises(EstimatorError, match="`config` is dict"):
        Estimator(model_fn, config={})
    with pytest.raises(EstimatorError, match="pass one of them"):
        Estimator(model_fn, model_dir="a", config=RunConfig(tf_config={}, model_dir="b"))


def test_model_fn_must_return_a_spec_for_its_mode(tmp_path):
    est = Estimator(lambda features, labels, mode: {"loss": 1}, model_dir=str(tmp_path),
                    config=RunConfig(tf_config={}))
    with pytest.raises(SpecError, match="model_fn returned dict; expected an EstimatorSpec"):
        est.train(train_fn, max_steps=1)


@pytest.mark.parametrize("kwargs,field,text", [
    ({"mode": "training"}, "mode", "expected one of ModeKeys.TRAIN"),
    ({"mode": ModeKeys.TRAIN, "optimizer": keras.optimizers.SGD()}, "loss", "needs `loss`"),
    ({"mode": ModeKeys.TRAIN, "loss": 1.0}, "optimizer", "needs `optimizer`"),
    ({"mode": ModeKeys.TRAIN, "loss": 1.0, "optimizer": "adam"}, "optimizer", "expected a Keras 3 optimizer"),
    ({"mode": ModeKeys.TRAIN, "loss": 1.0, "train_op": object()}, "train_op", "no graph op"),
    ({"mode": ModeKeys.EVAL}, "loss", "needs `loss`"),
    ({"mode": ModeKeys.PREDICT}, "predictions", "needs `predictions`"),
    ({"mode": ModeKeys.EVAL, "loss": 1.0, "eval_metric_ops": {"acc": (1, 2)}}, "eval_metric_ops.acc",
     "TF1's \\(value_op, update_op\\)"),
    ({"mode": ModeKeys.EVAL, "loss": 1.0, "eval_metric_ops": {"loss": 1}}, "eval_metric_ops", "other than 'loss'"),
])
def test_estimator_spec_errors(kwargs, field, text):
    with pytest.raises(SpecError, match=text) as info:
        EstimatorSpec(**kwargs)
    assert info.value.field == field


def test_train_op_holding_an_optimizer_is_the_optimizer():
    optimizer = keras.optimizers.SGD()
    assert EstimatorSpec(ModeKeys.TRAIN, loss=1.0, train_op=optimizer).optimizer is optimizer


@pytest.mark.parametrize("factory,field", [
    (lambda: TrainSpec(train_fn, max_steps=0), "max_steps"),
    (lambda: TrainSpec("data", max_steps=1), "input_fn"),
    (lambda: EvalSpec(eval_fn, steps=0), "steps"),
    (lambda: EvalSpec(eval_fn, throttle_secs=-1), "throttle_secs"),
    (lambda: EvalSpec(eval_fn, start_delay_secs="soon"), "start_delay_secs"),
    (lambda: EvalSpec(eval_fn, name="../x"), "name"),
])
def test_spec_errors(factory, field):
    with pytest.raises(SpecError) as info:
        factory()
    assert info.value.field == field


def test_train_and_evaluate_checks_its_arguments(tmp_path):
    with pytest.raises(SpecError, match="`train_spec` is dict"):
        train_and_evaluate(_estimator(tmp_path), {}, EvalSpec(eval_fn))
