"""tf.estimator.tpu on CPU: TPUEstimator(use_tpu=False) trains, evaluates and predicts as TF ran it."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import toolkit.compat.v1 as tf1
from toolkit.estimator import ModeKeys, tpu

_SEEN_BATCH_SIZES: list[tuple[str, int]] = []


def _input_fn(params):
    _SEEN_BATCH_SIZES.append(("input_fn", params["batch_size"]))
    x = np.random.RandomState(0).normal(size=(64, 2)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(params["batch_size"], drop_remainder=True)


def _model_fn(features, labels, mode, params):
    """A BERT-style model_fn: it returns a TPUEstimatorSpec with eval_metrics and a scaffold_fn."""
    _SEEN_BATCH_SIZES.append((mode, params["batch_size"]))
    logits = tf1.layers.dense(features["x"], 1, name="out")
    probabilities = tf.sigmoid(logits)
    if mode == ModeKeys.PREDICT:
        return tpu.TPUEstimatorSpec(mode, predictions={"probabilities": probabilities})
    loss = tf1.losses.sigmoid_cross_entropy(labels, logits)
    train_op = tf1.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=tf1.train.get_global_step())

    def metric_fn(labels, probabilities):
        return {"accuracy": tf1.metrics.accuracy(labels, tf.round(probabilities))}

    return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, scaffold_fn=tf1.train.Scaffold,
                                eval_metrics=(metric_fn, {"labels": labels, "probabilities": probabilities}))


def test_tpu_estimator_on_cpu_trains_evaluates_and_predicts(tmp_path):
    config = tpu.RunConfig(model_dir=str(tmp_path), tf_config={},
                           tpu_config=tpu.TPUConfig(iterations_per_loop=10, num_shards=8))
    est = tpu.TPUEstimator(_model_fn, config=config, use_tpu=False, train_batch_size=16, eval_batch_size=8,
                           predict_batch_size=4)
    _SEEN_BATCH_SIZES.clear()
    est.train(_input_fn, max_steps=40)
    assert est.get_variable_value("global_step") == 40
    metrics = est.evaluate(_input_fn, steps=4)
    assert metrics["accuracy"] > 0.85 and metrics["global_step"] == 40
    predictions = est.predict(_input_fn, yield_single_examples=False)
    assert next(predictions)["probabilities"].shape == (4, 1)
    assert _SEEN_BATCH_SIZES == [("input_fn", 16), ("train", 16), ("input_fn", 8), ("eval", 8),
                                 ("input_fn", 4), ("infer", 4)]
    assert config.replace(save_summary_steps=5).tpu_config.iterations_per_loop == 10


def test_tpu_only_options_are_refused_by_name(tmp_path):
    config = tpu.RunConfig(model_dir=str(tmp_path), tf_config={})
    with pytest.raises(tpu.TPUError, match="`use_tpu` is True, which needs a TPU") as info:
        tpu.TPUEstimator(_model_fn, config=config, use_tpu=True, train_batch_size=8)
    assert info.value.field == "use_tpu"
    with pytest.raises(tpu.TPUError, match="`master` is 'grpc://10.0.0.2:8470', which needs a TPU"):
        tpu.RunConfig(master="grpc://10.0.0.2:8470", tf_config={})
    with pytest.raises(ValueError, match="must be provided with type `tpu_config.RunConfig`"):
        tpu.TPUEstimator(_model_fn, use_tpu=False)
    with pytest.raises(ValueError, match="reserved keys"):
        tpu.TPUEstimator(_model_fn, config=config, use_tpu=False, params={"batch_size": 3})
