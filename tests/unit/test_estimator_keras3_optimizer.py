"""A Keras 3 optimizer inside a model_fn, as the Estimator guide's object-based checkpoint section writes it.

The guide's ``model_fn`` (a Keras model, ``tf.keras.optimizers.Adam(0.1)``, ``tf.GradientTape``,
``opt.apply_gradients(zip(gradients, variables))`` grouped with ``global_step.assign_add(1)``) trains:
each weight moves as Adam(0.1) moves it, the global step counts the steps, and the checkpoint holds
the TF1 twin's slots. A Keras 3 optimizer with no TF1 twin is refused
with ``TrainingError`` naming it.
"""
from __future__ import annotations

import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from toolkit import estimator as tf_estimator  # noqa: E402
from toolkit.training import TrainingError  # noqa: E402

tf_compat = tf.compat.v1


class Net(keras.Model):
    """A simple linear model."""

    def __init__(self):
        super().__init__()
        self.l1 = keras.layers.Dense(5, kernel_initializer="zeros")

    def call(self, x):
        return self.l1(x)


def _model_fn(make_optimizer):
    def model_fn(features, labels, mode):
        net = Net()
        opt = make_optimizer()
        with tf.GradientTape() as tape:
            output = net(features["x"])
            loss = tf.reduce_mean(tf.abs(output - features["y"]))
        variables = net.trainable_variables
        gradients = tape.gradient(loss, variables)
        step = tf_compat.train.get_global_step()
        return tf_estimator.EstimatorSpec(mode, loss=loss,
                                          train_op=tf.group(opt.apply_gradients(zip(gradients, variables)),  # noqa: B905
                                                            step.assign_add(1)))
    return model_fn


def _toy_input():
    return tf.data.Dataset.from_tensors({"x": [[1.0]], "y": [[10.0]]}).repeat(10)


def test_guide_model_fn_with_a_keras3_optimizer_trains(tmp_path):
    est = tf_estimator.Estimator(_model_fn(lambda: keras.optimizers.Adam(0.1)), model_dir=str(tmp_path))
    est.train(_toy_input, steps=10)
    assert est.get_variable_value("global_step") == 10
    (kernel,) = [name for name in est.get_variable_names() if name.endswith("kernel")]
    # zeros before; Adam(0.1) moves each weight by about 0.1 per step towards y=10
    assert 0.5 < est.get_variable_value(kernel).mean() <= 1.01
    assert any(name.endswith("kernel/Adam") for name in est.get_variable_names())  # the v1 twin's slots


def test_keras3_optimizer_without_a_tf1_twin_is_a_training_error(tmp_path):
    est = tf_estimator.Estimator(_model_fn(lambda: keras.optimizers.Lion(0.1)), model_dir=str(tmp_path))
    with pytest.raises(TrainingError, match="Lion") as info:
        est.train(_toy_input, steps=1)
    assert info.value.field == "optimizer"
    assert tf.train.latest_checkpoint(str(tmp_path)) is None  # refused while building, nothing written
