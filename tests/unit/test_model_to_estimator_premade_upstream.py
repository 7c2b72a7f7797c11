"""``model_to_estimator`` on the cases of tensorflow/estimator's ``keras_premade_model_test.py`` and
``keras_distribute_strategy_test.py`` (public API only).

Ported from upstream's tests (Copyright The TensorFlow Authors, Apache License 2.0): their data helpers, then
``test_train_premade_linear_model`` (a subclassed ``tf_keras.experimental.LinearModel`` fitted by Keras, then
500 Estimator steps on labels of shape ``(batch,)`` against predictions ``(batch, 1)``: the loss must fall below
0.1), ``test_train_premade_linear_model_with_dense_features`` (a ``DenseFeatures`` layer over an indicator
column), and the step count ``_TRAIN_SIZE / 16`` (a float) that every ``keras_distribute_strategy_test`` case
trains with (here without a strategy; ``tests/cluster`` runs model_to_estimator under MirroredStrategy).
Also ``tf.compat.v1.keras.estimator.model_to_estimator(use_v2_estimator=True)``, the argument upstream's
``keras_lib`` took.
"""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf_keras = pytest.importorskip("tf_keras")

from toolkit.compat.v1 import estimator as v1_estimator  # noqa: E402
from toolkit.estimator import Estimator, RunConfig, model_to_estimator  # noqa: E402

_RANDOM_SEED = 1337


def gen_input_fn(x, y=None, batch_size=32, num_epochs=10, shuffle=False):
    def input_fn():
        ds = tf.compat.v1.data.Dataset.from_tensor_slices((x, y) if y is not None else x)
        if shuffle:
            ds = ds.shuffle(1000)
        return ds.repeat(num_epochs).batch(batch_size)

    return input_fn


def get_resource_for_simple_model():
    """Upstream's helper (its random choice between a plain array and a dict keyed by input/output name kept)."""
    np.random.seed(_RANDOM_SEED)
    x_train = np.random.uniform(low=-5, high=5, size=(64, 2)).astype("f")
    y_train = .3 * x_train[:, 0] + .2 * x_train[:, 1]
    x_test = np.random.uniform(low=-5, high=5, size=(64, 2)).astype("f")
    y_test = .3 * x_test[:, 0] + .2 * x_test[:, 1]
    train_input_fn = gen_input_fn(x=x_train, y=y_train, num_epochs=None, shuffle=False)
    evaluate_input_fn = gen_input_fn(x=randomize_io_type(x_test, "input_1"), y=randomize_io_type(y_test, "output_1"),
                                     num_epochs=1, shuffle=False)
    return (x_train, y_train), (x_test, y_test), train_input_fn, evaluate_input_fn


def randomize_io_type(array, name):
    return array if np.random.random() > 0.5 else {name: array}


def _trained(keras_model, train_input_fn, eval_input_fn, steps, model_dir):
    """Upstream's round: the model as an Estimator (saver checkpoints, the test's seed), evaluated for one
    step before and after ``steps`` of training; (estimator, results before, results after)."""
    est = model_to_estimator(keras_model=keras_model, checkpoint_format="saver",
                             config=RunConfig(tf_random_seed=_RANDOM_SEED, model_dir=str(model_dir)))
    before = est.evaluate(input_fn=eval_input_fn, steps=1)
    est.train(input_fn=train_input_fn, steps=steps)
    return est, before, est.evaluate(input_fn=eval_input_fn, steps=1)


def test_upstream_train_premade_linear_model(tmp_path):
    (x_train, y_train), _, train_inp_fn, eval_inp_fn = get_resource_for_simple_model()
    linear_model = tf_keras.experimental.LinearModel(units=1)
    linear_model.compile(tf_keras.optimizers.legacy.SGD(0.1), "mse", ["mse"])
    linear_model.fit(x_train, y_train, epochs=10, verbose=0)

    est, before_eval_results, after_eval_results = _trained(linear_model, train_inp_fn, eval_inp_fn, 500, tmp_path)
    assert after_eval_results["loss"] < before_eval_results["loss"]
    assert after_eval_results["loss"] < 0.1
    # the data are exactly linear: the weights are y's coefficients (they were not reset at every step)
    np.testing.assert_allclose(est.get_variable_value("linear_model/kernel").ravel(), [.3, .2], atol=1e-3)


def test_upstream_train_premade_linear_model_with_dense_features(tmp_path):
    tf_keras_v1 = pytest.importorskip("tf_keras.api._v1.keras")
    vocab_list = ["alpha", "beta", "gamma"]
    vocab_val = [0.4, 0.6, 0.9]
    np.random.seed(_RANDOM_SEED)
    data = np.random.choice(vocab_list, size=256)
    y = np.zeros_like(data, dtype=np.float32)
    for vocab, val in zip(vocab_list, vocab_val, strict=True):
        indices = np.where(data == vocab)
        y[indices] = val + np.random.uniform(low=-0.01, high=0.01, size=indices[0].shape)
    cat_column = tf.feature_column.categorical_column_with_vocabulary_list(key="symbol", vocabulary_list=vocab_list)
    ind_column = tf.feature_column.indicator_column(cat_column)
    keras_input = tf_keras.layers.Input(name="symbol", shape=3, dtype=tf.dtypes.string)
    h = tf_keras_v1.layers.DenseFeatures([ind_column])({"symbol": keras_input})
    h = tf_keras.experimental.LinearModel(units=1)(h)
    model = tf_keras.models.Model(inputs=keras_input, outputs=h)
    model.compile(tf_keras.optimizers.legacy.SGD(0.1), "mse", ["mse"])
    train_input_fn = v1_estimator.inputs.numpy_input_fn(x={"symbol": data}, y=y, num_epochs=20, shuffle=False)
    eval_input_fn = v1_estimator.inputs.numpy_input_fn(x={"symbol": data}, y=y, num_epochs=20, shuffle=False)
    _, before_eval_results, after_eval_results = _trained(model, train_input_fn, eval_input_fn, 30, tmp_path)
    assert after_eval_results["loss"] < before_eval_results["loss"]
    assert after_eval_results["loss"] < 0.05


def _simple_functional_model():
    a = tf_keras.layers.Input(shape=(10,))
    b = tf_keras.layers.Dense(16, activation="relu")(a)
    b = tf_keras.layers.Dense(2, activation="softmax")(b)
    model = tf_keras.models.Model(inputs=[a], outputs=[b])
    model.compile(loss="categorical_crossentropy", metrics=[tf_keras.metrics.CategoricalAccuracy()],
                  optimizer=tf_keras.optimizers.legacy.RMSprop(learning_rate=0.01))
    return model


def test_upstream_fractional_steps_train_as_tf_did_and_use_v2_estimator(tmp_path):
    rng = np.random.RandomState(_RANDOM_SEED)
    x = rng.normal(size=(200, 10)).astype("f")
    y = tf_keras.utils.to_categorical((x[:, 0] > 0).astype("int64"), 2)

    def input_fn():
        return tf.compat.v1.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

    # tf.keras.estimator (TF1's) with upstream keras_lib's use_v2_estimator
    import toolkit.compat.v1 as tf1  # the published spelling: tf.keras.estimator.model_to_estimator

    keras = tf1.keras
    est = keras.estimator.model_to_estimator(keras_model=_simple_functional_model(), use_v2_estimator=True,
                                             config=RunConfig(tf_random_seed=_RANDOM_SEED, model_dir=str(tmp_path)))
    assert type(est) is Estimator and not hasattr(est, "export_savedmodel")
    before = est.evaluate(input_fn=input_fn, steps=1)
    est.train(input_fn=input_fn, steps=200 / 16)  # 12.5: TF's stop hook ran until the count reached it, 13
    assert est.get_variable_value("global_step") == 13
    assert est.evaluate(input_fn=input_fn, steps=1)["loss"] < before["loss"]
    v1_est = keras.estimator.model_to_estimator(keras_model=_simple_functional_model(),
                                                model_dir=str(tmp_path / "v1"))
    assert hasattr(v1_est, "export_savedmodel")  # the default stays TF1's Estimator
    with pytest.raises(ValueError, match="use_v2_estimator"):
        keras.estimator.model_to_estimator(keras_model=_simple_functional_model(), use_v2_estimator="yes",
                                           model_dir=str(tmp_path / "bad"))


class _TfStyleRegressionOutput:
    """An ExportOutput of TF's own kind (not toolkit's class): what ``keras_test`` passes as
    ``export_outputs={'c': export_output.RegressionOutput}`` (TF's saved_model ``export_output`` module)."""

    def __init__(self, value):
        self.value = value

    def as_signature_def(self, receiver_tensors):
        return tf.compat.v1.saved_model.predict_signature_def(receiver_tensors, {"outputs": self.value})


def test_upstream_export_custom_signatures_with_tfs_own_export_output_classes(tmp_path):
    from toolkit.estimator.export import ClassificationOutput, build_parsing_serving_input_receiver_fn

    rng = np.random.RandomState(_RANDOM_SEED)
    a, b = tf_keras.Input(shape=(1,), name="a"), tf_keras.Input(shape=(1,), name="b")
    c = tf_keras.layers.Dense(units=1, name="c")(a)
    d = tf_keras.layers.Dense(units=1, name="d", activation="sigmoid")(b)
    model = tf_keras.Model(inputs={"a": a, "b": b}, outputs={"c": c, "d": d})
    model.compile("sgd", {"c": "mse", "d": "binary_crossentropy"}, [])
    model.fit({"a": rng.random_sample((64, 1)), "b": rng.random_sample((64, 1))},
              {"c": rng.random_sample((64, 1)), "d": rng.random_sample((64, 1))}, verbose=0)
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path), checkpoint_format="saver",
                             export_outputs={"c": _TfStyleRegressionOutput, "d": ClassificationOutput})
    spec = {name: tf.io.FixedLenFeature([1], dtype=tf.float32) for name in ("a", "b")}
    exported = est.export_saved_model(str(tmp_path / "export"), build_parsing_serving_input_receiver_fn(spec))
    signatures = tf.saved_model.load(exported.decode() if isinstance(exported, bytes) else exported).signatures
    assert {"c", "d", "serving_default"} <= set(signatures)
