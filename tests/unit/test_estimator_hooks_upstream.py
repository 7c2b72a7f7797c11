"""experimental.InMemoryEvaluatorHook on the cases of tensorflow/estimator's ``hooks/hooks_test.py`` (public API only).

Ported from upstream's test (Copyright The TensorFlow Authors, Apache License 2.0): its summary reader, then
``InMemoryEvaluatorHookTest``'s ``test_runs_eval_metrics`` (evaluations before training, every 4 steps and at the
end, each summary at its step), ``test_uses_latest_variable_value`` (an evaluation sees the training session's
current variables, not a checkpoint), the refusals of a custom saver, a custom ``init_fn`` and saveables outside
the global variables (upstream's phrases), and of a cluster (with ``model_dir`` given: tfdist refuses a cluster
Estimator without one at construction, which upstream's two cluster cases do not pass).
"""
from __future__ import annotations

import glob
import json
import os

import pytest
import tensorflow as tf

from toolkit.estimator import DNNClassifier, Estimator, EstimatorSpec, ModeKeys, RunConfig
from toolkit.estimator.experimental import InMemoryEvaluatorHook

tf_keras = pytest.importorskip("tf_keras")
v1 = tf.compat.v1


def summary_step_keyword_to_value_mapping(dir_):
    """Upstream's helper: {step: {tag: simple_value}} from the newest event file in ``dir_``."""
    v1.summary.FileWriterCache.clear()
    event_paths = sorted(glob.glob(os.path.join(dir_, "events*")))
    found: dict[int, dict[str, float]] = {}
    for event in v1.train.summary_iterator(event_paths[-1]):
        found.setdefault(event.step, {})
        for value in event.summary.value:
            found[event.step][value.tag] = value.simple_value
    return found


def _range_input_fn():
    return v1.data.Dataset.range(10)


def test_upstream_runs_eval_metrics_before_every_n_iter_and_at_end(tmp_path):
    def model_fn(features, labels, mode):
        if mode == ModeKeys.TRAIN:
            with tf.control_dependencies([features]):
                train_op = v1.assign_add(v1.train.get_global_step(), 1)
            return EstimatorSpec(mode, loss=tf.constant(3.), train_op=train_op)
        mean = tf_keras.metrics.Mean()
        mean.update_state(features)
        return EstimatorSpec(mode, loss=tf.constant(5.), eval_metric_ops={"mean_of_features": mean})

    est = Estimator(model_fn=model_fn, model_dir=str(tmp_path))
    est.train(_range_input_fn, hooks=[InMemoryEvaluatorHook(est, _range_input_fn, every_n_iter=4)])

    found = summary_step_keyword_to_value_mapping(est.eval_dir())
    assert set(found) == {0, 4, 8, 10}  # before training, every 4 steps, at the end
    for step in (0, 4, 8, 10):
        assert found[step]["mean_of_features"] == 4.5  # sum(range(10)) / 10


def test_upstream_uses_latest_variable_value_not_a_checkpoint(tmp_path):
    def model_fn(features, labels, mode):
        step = v1.train.get_global_step()
        w = v1.get_variable("w", shape=[], initializer=v1.initializers.zeros(), dtype=tf.int64)
        if mode == ModeKeys.TRAIN:
            with tf.control_dependencies([features]):
                step_inc = v1.assign_add(step, 1)
            with tf.control_dependencies([step_inc]):
                assign_w_to_step_plus_2 = w.assign(step + 2)
            return EstimatorSpec(mode, loss=tf.constant(3.), train_op=assign_w_to_step_plus_2)
        with tf.control_dependencies([features]):
            loss = tf.constant(5.)
        mean = tf_keras.metrics.Mean()
        mean.update_state(w)
        return EstimatorSpec(mode, loss=loss, eval_metric_ops={"mean_of_const": mean})

    # no checkpoint is written while training: the evaluations can only read the live session's variables
    est = Estimator(model_fn=model_fn, config=RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=None,
                                                        save_checkpoints_secs=None))
    est.train(_range_input_fn, hooks=[InMemoryEvaluatorHook(est, _range_input_fn, every_n_iter=4)])

    found = summary_step_keyword_to_value_mapping(est.eval_dir())
    assert found[0]["mean_of_const"] == 0  # w = 0 at step 0, else step + 2
    assert found[4]["mean_of_const"] == 6
    assert found[10]["mean_of_const"] == 12
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


def _constant_model_fn(scaffold):
    def model_fn(features, labels, mode):
        mean = tf_keras.metrics.Mean()
        mean.update_state(tf.constant(2.))
        return EstimatorSpec(mode, loss=tf.constant(3.), scaffold=scaffold(), train_op=tf.constant(5.),
                             eval_metric_ops={"mean_of_features": mean})

    return model_fn


def _init_fn(scaffold, session):
    del scaffold, session


@pytest.mark.parametrize(("scaffold", "phrase"), [
    (lambda: v1.train.Scaffold(saver=v1.train.Saver()), "does not support custom saver"),
    (lambda: v1.train.Scaffold(init_fn=_init_fn), "does not support custom init_fn"),
])
def test_upstream_refuses_a_custom_saver_or_init_fn_in_eval(tmp_path, scaffold, phrase):
    est = Estimator(model_fn=_constant_model_fn(scaffold), model_dir=str(tmp_path))
    evaluator = InMemoryEvaluatorHook(est, _range_input_fn)
    with pytest.raises(ValueError, match=phrase):
        evaluator.begin()


def test_upstream_refuses_saveables_other_than_global_variables_before_training(tmp_path):
    def scaffold():
        w = v1.Variable(initial_value=[0.], trainable=False, collections=[v1.GraphKeys.SAVEABLE_OBJECTS])
        return v1.train.Scaffold(init_op=tf.group([w.initializer, v1.train.get_global_step().initializer]))

    class StopAfterThree(v1.train.SessionRunHook):  # the model_fn never reads its input nor steps
        def __init__(self):
            self.runs = 0

        def after_run(self, run_context, run_values):
            self.runs += 1
            if self.runs >= 3:
                run_context.request_stop()

    est = Estimator(model_fn=_constant_model_fn(scaffold), model_dir=str(tmp_path))
    stop = StopAfterThree()
    with pytest.raises(ValueError, match="does not support saveables other than global variables"):
        est.train(_range_input_fn, hooks=[InMemoryEvaluatorHook(est, _range_input_fn, steps=2), stop])
    assert stop.runs == 0  # refused in begin(), before the first step
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


@pytest.mark.parametrize("cluster", [
    {"chief": ["host0:0"], "worker": ["host3:3", "host4:4", "host5:5"]},
    {"chief": ["host0:0"], "ps": ["host1:1"]},
])
def test_upstream_refuses_a_cluster(tmp_path, monkeypatch, cluster):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    dnn = DNNClassifier(feature_columns=[tf.feature_column.numeric_column("x")], hidden_units=[3, 1],
                        model_dir=str(tmp_path))
    with pytest.raises(ValueError, match="supports only single machine"):
        InMemoryEvaluatorHook(dnn, lambda: None)
