"""tf.estimator.experimental's hooks: early stopping ends training at the right step; in-memory evaluation."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator import Estimator, EstimatorError, EstimatorSpec, RunConfig, experimental
from toolkit.estimator.hooks.early_stopping import read_eval_metrics

tf1 = tf.compat.v1


def _constant_loss_model_fn(features, labels, mode):
    """A loss of 1.0 that never improves; each step adds one to the global step."""
    w = tf1.get_variable("w", [], initializer=tf1.zeros_initializer())
    loss = tf.reduce_mean(features["x"]) * 0.0 + 1.0 + w * 0.0
    return EstimatorSpec(mode, loss=loss, train_op=tf1.assign_add(tf1.train.get_global_step(), 1))


def _input_fn():
    return {"x": np.ones([2], np.float32)}, np.ones([2], np.float32)


def test_stop_if_no_decrease_ends_training_after_max_steps_without_improvement(tmp_path):
    est = Estimator(_constant_loss_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    evaluator = experimental.InMemoryEvaluatorHook(est, _input_fn, steps=1, every_n_iter=10)
    stop = experimental.stop_if_no_decrease_hook(est, "loss", 20, run_every_secs=None, run_every_steps=10)
    est.train(_input_fn, hooks=[evaluator, stop], max_steps=1000)
    # evaluations at steps 0, 10, 20 (before training, then every 10); at 20 the loss has not decreased for
    # 20 steps, so the hook stops training after the step that read global step 20. (The hook reads the
    # global step in the same session.run as the train op, as TF's did: the read may see the step before
    # or after that run's increment, so the stop may come one step later.)
    stopped = est.get_variable_value("global_step")
    assert stopped in (21, 22)
    steps = list(read_eval_metrics(est.eval_dir()))
    assert steps[:3] == [0, 10, 20] and steps[-1] == stopped  # the last one: the hook's evaluation at the end


def test_stop_if_higher_hook_stops_once_the_metric_crosses(tmp_path):
    est = Estimator(_constant_loss_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    evaluator = experimental.InMemoryEvaluatorHook(est, _input_fn, steps=1, every_n_iter=5)
    never = experimental.stop_if_higher_hook(est, "loss", 2.0, run_every_secs=None, run_every_steps=5)
    crossed = experimental.stop_if_lower_hook(est, "loss", 1.5, min_steps=6, run_every_secs=None,
                                              run_every_steps=5)
    est.train(_input_fn, hooks=[evaluator, never, crossed], max_steps=100)
    assert est.get_variable_value("global_step") in (11, 12)  # first evaluation at step >= 6 is at 10


def test_early_stopping_refuses_what_tf_refused(tmp_path):
    est = Estimator(_constant_loss_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    with pytest.raises(TypeError, match="`estimator` must have type `tf.estimator.Estimator`"):
        experimental.stop_if_no_increase_hook("not an estimator", "auc", 10)
    with pytest.raises(EstimatorError, match="Only one of `run_every_secs` and `run_every_steps`"):
        experimental.make_early_stopping_hook(est, lambda: False, run_every_secs=10, run_every_steps=10)
    with pytest.raises(EstimatorError, match="invalid every_n_iter=0"):
        experimental.InMemoryEvaluatorHook(est, _input_fn, every_n_iter=0)


def test_stop_at_checkpoint_step_hook_is_the_chiefs_stop_at_step(tmp_path):
    est = Estimator(_constant_loss_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    est.train(_input_fn, hooks=[experimental.make_stop_at_checkpoint_step_hook(est, 7)])
    assert est.get_variable_value("global_step") == 7
