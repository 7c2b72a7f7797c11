"""The Estimator core behaves as tf.estimator did: spec checks and their exception types, inputs, no checkpoint."""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator import Estimator as EstimatorV2
from toolkit.estimator import (
    EstimatorError,
    EstimatorSpec,
    EvalSpec,
    LatestExporter,
    ModeKeys,
    RunConfig,
    SpecError,
    TrainSpec,
    add_metrics,
    train_and_evaluate,
)
from toolkit.estimator.export import build_raw_serving_input_receiver_fn

tf1 = tf.compat.v1


def _model_fn(features, labels, mode):
    w = tf1.get_variable("w", [1], initializer=tf1.zeros_initializer())
    predictions = tf.reshape(tf.cast(features["x"], tf.float32), [-1, 1]) * w
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions={"y": predictions})
    loss = tf.reduce_mean(tf.square(predictions - tf.reshape(tf.cast(labels, tf.float32), [-1, 1])),
                          keepdims=True)[0:1]  # shape [1]: TF took it and made it a scalar
    train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tf1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op, predictions={"y": predictions})


def _numpy_input_fn():
    return {"x": np.array([1.0, 2.0], np.float32)}, [2.0, 4.0]  # a NumPy array and a list, as TF took them


def test_spec_checks_raise_tf_types_with_tf_phrases():
    with tf.Graph().as_default():
        with pytest.raises(TypeError, match="loss must be Tensor") as info:
            EstimatorSpec(ModeKeys.TRAIN, loss=1.0, train_op=tf1.no_op())
        assert isinstance(info.value, SpecError) and info.value.field == "loss"
        with pytest.raises(SpecError, match="Loss must be scalar"):
            EstimatorSpec(ModeKeys.TRAIN, loss=tf.constant([1.0, 2.0]), train_op=tf1.no_op())
        with pytest.raises(TypeError, match="loss must be Tensor"):
            EstimatorSpec(ModeKeys.EVAL, loss=tf.sparse.SparseTensor([[0]], [0.0], [1]))
        with pytest.raises(TypeError, match=r"Values of eval_metric_ops must be \(metric_value, update_op\)"):
            EstimatorSpec(ModeKeys.EVAL, loss=tf.constant(1.0), eval_metric_ops={"m": tf.constant(1.0)})
        with pytest.raises(TypeError, match="All hooks must be SessionRunHook instances"):
            EstimatorSpec(ModeKeys.EVAL, loss=tf.constant(1.0), evaluation_hooks=[object()])
        assert EstimatorSpec(ModeKeys.TRAIN, loss=tf.constant([3.0]), train_op=tf1.no_op()).loss.shape == ()
    with tf.Graph().as_default():
        elsewhere = tf.constant(1.0)
    with tf.Graph().as_default(), pytest.raises(SpecError, match="must be from the default graph"):
        EstimatorSpec(ModeKeys.EVAL, loss=elsewhere)


def test_constructor_checks_model_fn_and_config_as_tf():
    with pytest.raises(EstimatorError, match="an instance of `RunConfig`"):
        EstimatorV2(model_fn=None, config="NotARunConfig")
    with pytest.raises(EstimatorError, match="model_fn must be provided"):
        EstimatorV2(model_fn=None)
    with pytest.raises(EstimatorError, match="does not include params argument"):
        EstimatorV2(lambda features, labels: None, params={"a": 1})
    with pytest.raises(EstimatorError, match=r"has following not expected args: \['something'\]"):
        EstimatorV2(lambda features, labels, something: None)


def test_numpy_inputs_train_evaluate_and_predict_with_tf_semantics(tmp_path):
    est = EstimatorV2(_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    # no checkpoint yet: evaluate and predict run on fresh variables (w = 0), as TF did
    assert est.evaluate(_numpy_input_fn, steps=1) == {"loss": pytest.approx(10.0), "global_step": 0}
    assert not os.path.exists(os.path.join(str(tmp_path), "checkpoint"))
    est.train(_numpy_input_fn, steps=30)
    assert est.get_variable_value("w")[0] == pytest.approx(2.0, abs=0.05)
    metrics = est.evaluate(_numpy_input_fn, steps=1, name="census-eval")
    assert metrics["global_step"] == 30 and metrics["loss"] < 0.01
    assert os.listdir(est.eval_dir("census-eval"))  # summaries where eval_dir() says
    predictions = est.predict(lambda: tf.data.Dataset.from_tensors({"x": np.array([3.0], np.float32)}))
    assert next(predictions)["y"] == pytest.approx([6.0], abs=0.2)
    with pytest.raises(ValueError, match="model_fn does not take labels, but input_fn returns labels"):
        EstimatorV2(lambda features, mode: _model_fn(features, None, mode), model_dir=str(tmp_path),
                    config=RunConfig(tf_config={})).train(_numpy_input_fn, steps=1)
    with pytest.raises(TypeError, match="Hooks must be a SessionRunHook"):
        est.train(_numpy_input_fn, steps=1, hooks=["NotAHook"])
    with pytest.raises(ValueError, match="Must specify steps > 0"):
        est.evaluate(_numpy_input_fn, steps=0)


def test_add_metrics_and_an_eval_spec_named_freely(tmp_path):
    est = EstimatorV2(_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    est.train(_numpy_input_fn, steps=2)

    def mean_prediction(predictions):
        return {"mean_y": tf1.metrics.mean(predictions["y"])}

    with_metric = add_metrics(est, mean_prediction)
    assert with_metric.model_dir == est.model_dir
    assert set(with_metric.evaluate(_numpy_input_fn, steps=1)) == {"loss", "mean_y", "global_step"}
    assert EvalSpec(_numpy_input_fn, name="census-eval").name == "census-eval"
    with pytest.raises(SpecError, match="without '/'"):
        EvalSpec(_numpy_input_fn, name="../up")


def test_exporters_copy_assets_extra_into_the_export(tmp_path):
    est = EstimatorV2(_model_fn, model_dir=str(tmp_path / "m"), config=RunConfig(tf_config={}))
    est.train(_numpy_input_fn, steps=1)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n")
    receiver = build_raw_serving_input_receiver_fn({"x": tf.zeros([1], tf.float32)})
    exporter = LatestExporter("latest", receiver, assets_extra={"data/vocab.txt": str(vocab)})
    path = exporter.export(est, str(tmp_path / "export"), est.latest_checkpoint(), {}, False)
    copied = tmp_path / "export" / os.path.basename(path) / "assets.extra" / "data" / "vocab.txt"
    assert copied.read_text() == "a\nb\n"
    assert tf.saved_model.load(path).signatures["serving_default"](x=tf.constant([2.0]))["y"].shape == (1, 1)


def test_an_evaluator_index_above_zero_is_kept_by_run_config_and_refused_by_train_and_evaluate(tmp_path):
    doc = {"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "evaluator", "index": 3}}
    config = RunConfig(model_dir=str(tmp_path), tf_config=doc)   # as TF's RunConfig: it reads the index
    assert (config.task_type, config.task_id, config.is_chief, config.num_worker_replicas) == ("evaluator", 3, False, 0)
    assert config.replace(keep_checkpoint_max=2).task_id == 3
    est = EstimatorV2(lambda features, labels, mode: None, config=config)
    spec = (TrainSpec(lambda: ({"x": [[1.0]]}, [[1.0]]), max_steps=1), EvalSpec(lambda: ({"x": [[1.0]]}, [[1.0]])))
    with pytest.raises(SpecError, match=r"there can only be one `evaluator` task \(with task id 0\)") as info:
        train_and_evaluate(est, *spec)
    assert info.value.field == "task.index" and "is 3 for the evaluator" in str(info.value)
    assert not any(tmp_path.iterdir())   # refused before anything was written


def test_predict_warns_as_tf_when_input_fn_would_yield_forever(tmp_path, monkeypatch):
    warned = []
    monkeypatch.setattr(tf1.logging, "warning", lambda message, *args: warned.append(message % args))

    def model_fn(features, labels, mode):
        return EstimatorSpec(mode, predictions={"y": features["x"] * 2.0})

    est = EstimatorV2(model_fn, model_dir=str(tmp_path))
    assert next(est.predict(lambda: {"x": tf.constant([[1.0]])}))["y"].tolist() == [2.0]
    assert any("Input graph does not use tf.data.Dataset or contain a QueueRunner" in m for m in warned), warned
    warned.clear()
    dataset = lambda: tf.data.Dataset.from_tensors({"x": [[3.0]]})  # noqa: E731
    assert [p["y"].tolist() for p in est.predict(dataset)] == [[6.0]]   # ends with the data
    assert not any("QueueRunner" in m for m in warned), warned
