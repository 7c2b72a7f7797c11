"""tf.estimator behaviour the API walk does not see: local ``train_and_evaluate`` evaluates as TF's ``run_local``
(after checkpoints, throttled); ``experimental_export_all_saved_models``; a re-exported ``StopAtStepHook``
stops training.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import toolkit.estimator as estimator_lib
from toolkit.estimator import Estimator, EstimatorSpec, EvalSpec, RunConfig, TrainSpec, train_and_evaluate
from toolkit.estimator.hooks.early_stopping import read_eval_metrics

tf1 = tf.compat.v1


def _model_fn(features, labels, mode):
    w = tf1.get_variable("w", [], initializer=tf1.zeros_initializer())
    if mode == "infer":
        return EstimatorSpec(mode, predictions={"y": features["x"] * w})
    loss = tf.reduce_mean(tf.square(features["x"] * w - labels))
    train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tf1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op, predictions={"y": features["x"] * w})


def _input_fn():
    return {"x": np.ones([4], np.float32)}, np.full([4], 2.0, np.float32)


def _run(tmp_path, throttle_secs):
    config = RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=10, tf_config={})
    est = Estimator(_model_fn, config=config)
    result, _ = train_and_evaluate(est, TrainSpec(_input_fn, max_steps=40),
                                   EvalSpec(_input_fn, steps=1, throttle_secs=throttle_secs))
    return result, list(read_eval_metrics(est.eval_dir()))


def test_local_train_and_evaluate_evaluates_each_checkpoint_once_throttle_secs_passed(tmp_path):
    result, steps = _run(tmp_path, throttle_secs=0)
    assert steps == [10, 20, 30, 40]  # every save after the untrained model's, the last one included
    assert result["global_step"] == 40


def test_local_train_and_evaluate_skips_throttled_checkpoints_but_evaluates_the_last(tmp_path):
    result, steps = _run(tmp_path, throttle_secs=3600)
    assert steps == [10, 40]
    assert result["global_step"] == 40


def test_the_re_exported_stop_at_step_hook_stops_training(tmp_path):
    est = Estimator(_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    est.train(_input_fn, hooks=[estimator_lib.StopAtStepHook(last_step=7)], max_steps=1000)
    assert est.get_variable_value("global_step") == 7


def test_export_all_saved_models_writes_one_graph_per_mode_over_one_set_of_variables(tmp_path):
    from toolkit.estimator import ModeKeys, experimental
    from toolkit.estimator.export import build_raw_serving_input_receiver_fn

    est = Estimator(_model_fn, model_dir=str(tmp_path / "model"), config=RunConfig(tf_config={}))
    est.train(_input_fn, max_steps=20)
    trained_w = est.get_variable_value("w")
    features, labels = {"x": tf.zeros([4], tf.float32)}, tf.zeros([4], tf.float32)
    path = est.experimental_export_all_saved_models(tmp_path / "export", {
        ModeKeys.TRAIN: experimental.build_raw_supervised_input_receiver_fn(features, labels),
        ModeKeys.EVAL: experimental.build_raw_supervised_input_receiver_fn(features, labels),
        ModeKeys.PREDICT: build_raw_serving_input_receiver_fn(features)})
    for tags, signature in ((["train"], "train"), (["eval"], "eval"), (["serve"], "serving_default")):
        with tf.Graph().as_default(), tf1.Session() as session:
            meta = tf1.saved_model.loader.load(session, tags, path)
            assert signature in meta.signature_def
            w = [v for v in tf1.global_variables() if v.op.name == "w"][0]
            assert session.run(w) == pytest.approx(trained_w)
            if tags == ["train"]:  # the train op is kept, and it trains the restored variables
                inputs = meta.signature_def["train"].inputs
                assert sorted(inputs) == ["label", "x"]
                session.run(tf1.get_collection("saved_model_train_op")[0],
                            {inputs["x"].name: np.ones([4], np.float32),
                             inputs["label"].name: np.full([4], 2.0, np.float32)})
                assert session.run(w) != pytest.approx(trained_w)
    served = tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    assert served(x=tf.ones([4]))["y"].numpy() == pytest.approx(np.full(4, trained_w))
    with pytest.raises(estimator_lib.EstimatorError, match="No valid modes for exporting found"):
        est.experimental_export_all_saved_models(tmp_path / "export", {})
