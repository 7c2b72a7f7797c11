"""``model_to_estimator`` as TensorFlow's "Keras model to Estimator" tutorial used it, with a Keras 3 model.

The tutorial's model (Dense 16 relu, Dropout 0.2, Dense 3 logits, SparseCategoricalCrossentropy(from_logits=True),
'adam') on iris (scikit-learn's copy instead of the tfds download), here as a functional model: it trains,
evaluates, exports, the export serves, and the Keras model's weights are where the Estimator starts.
"""
from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from toolkit import estimator as tf_estimator  # noqa: E402
from toolkit.estimator import EstimatorError, model_to_estimator  # noqa: E402


def _iris():
    from sklearn.datasets import load_iris

    iris = load_iris()
    return iris.data.astype("float32"), iris.target.astype("int64")


def _model(loss=None):
    inputs = keras.Input((4,), name="features")
    hidden = keras.layers.Dropout(0.2)(keras.layers.Dense(16, activation="relu")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
    model.compile(loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="adam",
                  metrics=["accuracy"])
    return model


def test_functional_model_trains_evaluates_exports_and_serves(tmp_path):
    x, y = _iris()
    keras.utils.set_random_seed(0)  # the same initial weights whatever ran before in this process
    model = _model()
    kernel = model.layers[1].kernel.numpy()
    estimator = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "model"))

    def input_fn():
        return tf.data.Dataset.from_tensor_slices(({"features": x}, y)).shuffle(150, seed=0).batch(32).repeat()

    estimator.train(input_fn, steps=1)  # the Keras weights warm-start it: one Adam step (lr 1e-3) away
    # the layer keeps its Keras name (dense, or dense_N after other models in this process) in the Estimator
    np.testing.assert_allclose(estimator.get_variable_value(f"{model.layers[1].name}/kernel"), kernel, atol=2e-3)
    estimator.train(input_fn, steps=299)
    result = estimator.evaluate(input_fn, steps=5)
    assert result["global_step"] == 300 and result["accuracy"] > 0.6, result  # chance is 1/3
    receiver = tf_estimator.export.build_raw_serving_input_receiver_fn({"features": tf.constant(x[:1])})
    path = estimator.export_saved_model(str(tmp_path / "export"), receiver)
    served = tf.saved_model.load(path).signatures["serving_default"](features=tf.constant(x))
    (logits,) = served.values()
    assert logits.shape == (150, 3) and np.mean(np.argmax(logits.numpy(), -1) == y) > 0.6


def test_bad_input_names_the_argument(tmp_path):
    with pytest.raises(EstimatorError, match="Either `keras_model` or `keras_model_path`"):
        model_to_estimator()
    uncompiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    with pytest.raises(EstimatorError, match="has not been compiled"):
        model_to_estimator(keras_model=uncompiled, model_dir=str(tmp_path / "a"))
    inputs = keras.Input((4,), name="x")
    outputs = {"a": keras.layers.Dense(1, name="a")(inputs), "b": keras.layers.Dense(1, name="b")(inputs)}
    two = keras.Model(inputs, outputs)
    two.compile(optimizer=keras.optimizers.Lion(), loss={"a": "mse", "b": "mae"})
    with pytest.raises(EstimatorError, match="Lion, which has no TF1 graph counterpart") as info:
        model_to_estimator(keras_model=two, model_dir=str(tmp_path / "b"))
    assert info.value.field == "optimizer"
    two.compile(optimizer="sgd", loss={"a": "mse", "nope": "mae"})
    with pytest.raises(EstimatorError, match=r"compiled `loss` has keys \['nope'\] that are not its outputs") as info:
        model_to_estimator(keras_model=two, model_dir=str(tmp_path / "b"))
    assert info.value.field == "loss"
    two.compile(optimizer="sgd", loss="no_such_loss")
    with pytest.raises(EstimatorError, match="compiled loss 'no_such_loss' for output 'a' cannot be translated"):
        model_to_estimator(keras_model=two, model_dir=str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()  # refused before anything was written
