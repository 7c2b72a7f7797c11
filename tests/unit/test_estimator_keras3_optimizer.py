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


def _object_checkpoint_model_fn(features, labels, mode):
    """The guide's model_fn for object-based checkpoints: a tf.train.Checkpoint is the Scaffold's saver."""
    net = Net()
    opt = keras.optimizers.Adam(0.1)
    ckpt = tf.train.Checkpoint(step=tf_compat.train.get_global_step(), optimizer=opt, net=net)
    with tf.GradientTape() as tape:
        output = net(features["x"], training=True)
        loss = tf.reduce_mean(tf.abs(output - features["y"]))
    variables = net.trainable_variables
    gradients = tape.gradient(loss, variables)
    return tf_estimator.EstimatorSpec(mode, loss=loss,
                                      train_op=tf.group(opt.apply_gradients(zip(gradients, variables)),  # noqa: B905
                                                        ckpt.step.assign_add(1)),
                                      scaffold=tf_compat.train.Scaffold(saver=ckpt))


def test_object_based_checkpoints_save_the_step_and_the_slots_and_training_resumes_from_them(tmp_path):
    est = tf_estimator.Estimator(_object_checkpoint_model_fn, model_dir=str(tmp_path))
    est.train(_toy_input, steps=10)
    est.train(_toy_input, steps=5)  # resumes from the object-based checkpoint, the twin's slots included
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest.endswith("model.ckpt-15")
    names = [name for name, _ in tf.train.list_variables(latest)]
    assert "step/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert any(name.startswith("optimizer/tfdist_v1_state/") and "Adam" in name for name in names)
    # as the guide reads it back: a fresh Checkpoint of the same objects restores the step
    restored = tf.train.Checkpoint(step=tf.Variable(1, dtype=tf.int64), optimizer=keras.optimizers.Adam(0.1),
                                   net=Net())
    restored.restore(latest).expect_partial()
    assert int(restored.step.numpy()) == 15
