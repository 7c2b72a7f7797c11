"""Local ``train_and_evaluate`` evaluates as tf.estimator's ``run_local``: after checkpoints, throttled.

Also: a ``tf.estimator.StopAtStepHook`` (one of the re-exported session-run hooks) stops training,
and the boosted-trees names refuse with the reason while TensorFlow ships no kernels for them.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import toolkit.estimator as estimator_lib
from toolkit.estimator import Estimator, EstimatorSpec, EvalSpec, RunConfig, TrainSpec, train_and_evaluate
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.hooks.early_stopping import read_eval_metrics

tf1 = tf.compat.v1


def _model_fn(features, labels, mode):
    w = tf1.get_variable("w", [], initializer=tf1.zeros_initializer())
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


def test_boosted_trees_refuse_with_the_missing_kernels_named():
    from toolkit.estimator.canned.boosted_trees import kernels_available

    # TF 2.21 declares the BoostedTrees* ops without kernels; when a TensorFlow brings them back, this fails
    assert not kernels_available()
    column = tf.feature_column.numeric_column("x")
    with pytest.raises(CannedError, match="BoostedTreesClassifier needs TensorFlow's BoostedTrees\\* kernels") as info:
        estimator_lib.BoostedTreesClassifier([column], n_batches_per_layer=1)
    assert "TensorFlow Decision Forests" in str(info.value)
    with pytest.raises(CannedError, match="BoostedTreesRegressor"):
        estimator_lib.BoostedTreesRegressor([column], n_batches_per_layer=1)
