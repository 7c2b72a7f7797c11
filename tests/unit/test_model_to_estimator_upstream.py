"""``model_to_estimator`` on the cases of tensorflow/estimator's ``keras_test.py`` that published code relies on.

Ported from upstream's test (its data helper, its models, its assertions), with ``tf_keras`` (Keras 2, what
``tf.keras`` was then) and Keras 3 models: training lowers the loss; an Estimator evaluates the Keras model's own
weights to Keras' figures; multi-input / multi-output models take dict or list features and labels keyed by
input and output names; ``metric_names_map``, ``custom_objects``, sample weights, ``export_outputs``, a saved
model file, a ``tf.compat.v1.train`` optimizer given to ``compile``, a subclassed model; and
``tf.keras.estimator.model_to_estimator`` through ``toolkit.compat.v1``.
"""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf_keras = pytest.importorskip("tf_keras")
keras = pytest.importorskip("keras")

from toolkit.estimator import model_to_estimator  # noqa: E402
from toolkit.estimator.export import (  # noqa: E402
    ClassificationOutput,
    RegressionOutput,
    build_parsing_serving_input_receiver_fn,
)
from toolkit.estimator.keras_lib import FormattedKeyError  # noqa: E402

_SEED, _TRAIN, _INPUT, _CLASSES = 1337, 200, (10,), 2


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    """Each test starts from a fresh Keras 2 session, as upstream's did: its layer names ("dense_1") and its
    global graph do not depend on what other tests ran in the process first."""
    tf_keras.backend.clear_session()
    yield


def get_test_data(train_samples, test_samples, input_shape, num_classes, random_seed=None):
    """upstream's helper: each class a noisy copy of its random template."""
    if random_seed is not None:
        np.random.seed(random_seed)
    num_sample = train_samples + test_samples
    templates = 2 * num_classes * np.random.random((num_classes,) + input_shape)
    y = np.random.randint(0, num_classes, size=(num_sample,))
    x = np.zeros((num_sample,) + input_shape, dtype=np.float32)
    for i in range(num_sample):
        x[i] = templates[y[i]] + np.random.normal(loc=0, scale=1.0, size=input_shape)
    return (x[:train_samples], y[:train_samples]), (x[train_samples:], y[train_samples:])


def _data():
    (x_train, y_train), (x_test, y_test) = get_test_data(_TRAIN, 50, _INPUT, _CLASSES, _SEED)
    return (x_train, tf_keras.utils.to_categorical(y_train)), (x_test, tf_keras.utils.to_categorical(y_test))


def _input_fn(x, y=None, epochs=1, batch=128):
    return lambda: tf.data.Dataset.from_tensor_slices((x, y) if y is not None else x).repeat(epochs).batch(batch)


def _sequential(k=tf_keras, activation="relu"):
    return k.Sequential([k.Input(_INPUT, name="input_layer"), k.layers.Dense(16, activation=activation),
                         k.layers.Dropout(0.1), k.layers.Dense(_CLASSES, activation="softmax")])


def test_tf_keras_model_trains_and_evaluates_to_keras_figures_via_compat_v1(tmp_path):
    import toolkit.compat.v1 as tf1  # the published spelling: tf.keras.estimator.model_to_estimator

    (x_train, y_train), (x_test, y_test) = _data()
    metrics = ["binary_accuracy", "categorical_accuracy", "mean_absolute_error", "mean_squared_error",
               "kullback_leibler_divergence", "poisson", "top_k_categorical_accuracy"]
    model = _sequential()
    model.compile(loss="categorical_crossentropy", optimizer="rmsprop", metrics=metrics)
    model.fit(x_train, y_train, epochs=1, verbose=0)
    keras_eval = model.evaluate(x_test, y_test, batch_size=32, verbose=0)
    keras_pred = model.predict(x_test, verbose=0)

    est = tf1.keras.estimator.model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"),
                                                 checkpoint_format="saver")
    assert callable(est.export_savedmodel)  # TF1's keras.estimator gave a tf.compat.v1 Estimator
    before = est.evaluate(_input_fn(x_test, y_test))  # no checkpoint yet: the Keras weights (warm start)
    for i, name in enumerate(["loss", *metrics]):
        assert before[name] == pytest.approx(keras_eval[i], rel=1e-4), (name, keras_eval[i], before[name])
    predicted = np.array([p["dense_1"] for p in est.predict(_input_fn(x_test))])
    np.testing.assert_allclose(predicted, keras_pred, atol=1e-5)  # predictions keyed by the output layer's name

    est.train(_input_fn({"input_layer": x_train}, {"dense_1": y_train}, epochs=None, batch=16), steps=_TRAIN // 16)
    after = est.evaluate(_input_fn(x_test, y_test))
    assert after["global_step"] == _TRAIN // 16 and after["loss"] < before["loss"], (before, after)


def _multi_io(k):
    input_a = k.layers.Input(shape=(16,), name="input_a")
    input_b = k.layers.Input(shape=(16,), name="input_b")
    dense = k.layers.Dense(8, name="dense_1")
    merged = k.layers.concatenate([dense(input_a), dense(input_b)], name="merge")
    output_a = k.layers.Dense(3, activation="softmax", name="dense_2")(merged)
    output_b = k.layers.Dense(2, activation="softmax", name="dense_3")(merged)
    model = k.models.Model(inputs=[input_a, input_b], outputs=[output_a, output_b])
    model.compile(loss="categorical_crossentropy", optimizer="rmsprop",
                  metrics={"dense_2": "categorical_accuracy", "dense_3": "categorical_accuracy"})
    return model


def _multi_io_data():
    (a, c), (a_test, c_test) = get_test_data(_TRAIN, 50, (16,), 3, _SEED)
    (b, d), (b_test, d_test) = get_test_data(_TRAIN, 50, (16,), 2, _SEED)
    cat = tf_keras.utils.to_categorical
    return (a, b, cat(c), cat(d)), (a_test, b_test, cat(c_test), cat(d_test))


@pytest.mark.parametrize("k", [tf_keras, keras], ids=["tf_keras", "keras3"])
def test_multi_inputs_multi_outputs_dict_and_list_io_and_metric_names_map(tmp_path, k):
    (a, b, c, d), (a_test, b_test, c_test, d_test) = _multi_io_data()
    model = _multi_io(k)
    model.fit([a, b], [c, d], epochs=1, verbose=0)
    keras_eval = model.evaluate([a_test, b_test], [c_test, d_test], batch_size=32, verbose=0)
    names_map = {"dense_2_categorical_accuracy": "acc_1", "dense_3_categorical_accuracy": "acc_2"}
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"), metric_names_map=names_map)
    listed = _input_fn((a_test, b_test), (c_test, d_test))
    keyed = _input_fn({"input_a": a_test, "input_b": b_test}, {"dense_2": c_test, "dense_3": d_test})
    before = est.evaluate(listed)
    assert before == pytest.approx(est.evaluate(keyed)), "a list and a dict by name are the same inputs"
    assert before["acc_1"] == pytest.approx(keras_eval[-2], abs=1e-4)  # Keras lists the metrics last
    assert before["acc_2"] == pytest.approx(keras_eval[-1], abs=1e-4)
    assert before["loss"] == pytest.approx(keras_eval[0], rel=1e-4)  # the sum of both outputs' losses

    est.train(_input_fn({"input_a": a, "input_b": b}, {"dense_2": c, "dense_3": d}, epochs=None, batch=16),
              steps=_TRAIN // 16)
    assert est.evaluate(listed)["loss"] < before["loss"]
    first = next(iter(est.predict(_input_fn({"input_a": a_test, "input_b": b_test}))))
    assert sorted(first) == ["dense_2", "dense_3"] and first["dense_2"].shape == (3,)

    with pytest.raises(ValueError, match=r"Invalid `metric_names_map`.*do not exist"):
        model_to_estimator(keras_model=model, model_dir=str(tmp_path / "x"), metric_names_map={"binary_acc": ""})
    with pytest.raises(ValueError, match=r"Invalid `metric_names_map`.*unexpected keys"):
        model_to_estimator(keras_model=model, model_dir=str(tmp_path / "x"),
                           metric_names_map={**names_map, "abcde": ""})


def test_invalid_input_and_output_names_and_custom_objects(tmp_path):
    (x_train, y_train), _ = _data()

    def capped_relu(x):  # upstream's relu6, renamed: tf_keras now has a built-in relu6
        return tf_keras.backend.relu(x, max_value=6)

    model = _sequential(activation=capped_relu)
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["acc"])
    with pytest.raises(ValueError, match="capped_relu(.|\n)*custom_objects=") as info:
        model_to_estimator(keras_model=model, model_dir=str(tmp_path / "a"))
    assert info.value.field == "custom_objects"
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "b"),
                             custom_objects={"capped_relu": capped_relu})
    pattern = r"{} keys:(\s|.)*{}(\s|.)*Missed keys:(\s|.)*{}"
    with pytest.raises(FormattedKeyError, match=pattern.format("features", "invalid_input_name", "input_layer")):
        est.train(lambda: ({"invalid_input_name": x_train, "other": x_train}, y_train), steps=1)
    output = model.layers[-1].name  # dense_1, or dense_N after other models in this process
    with pytest.raises(KeyError, match=pattern.format("labels", "invalid_output_name", output)):
        est.train(lambda: ({"input_layer": x_train}, {"invalid_output_name": y_train}), steps=1)
    est.train(_input_fn(x_train, y_train), steps=1)
    assert est.get_variable_value("global_step") == 1


def test_sample_weights_weigh_the_loss_as_keras_does(tmp_path):
    input_layer = tf_keras.layers.Input(shape=(1,), name="input_layer")
    model = tf_keras.Model(inputs=input_layer, outputs=input_layer)
    model.compile(loss="mean_absolute_error", optimizer="adam")
    features, weights, targets = [[0.0], [0], [1], [1]], [0, 0.4, 1, 1], [[0], [1], [0], [1]]
    expected = model.test_on_batch(tf.constant(features), tf.constant(targets), tf.constant(weights))
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "one"))
    result = est.evaluate(lambda: tf.data.Dataset.from_tensors(
        ({"features": features, "sample_weights": weights}, targets)), steps=1)
    assert result["loss"] == pytest.approx(expected) and expected != pytest.approx(0.5)  # unweighted: 0.5


def test_export_before_and_after_training_and_custom_signatures(tmp_path):
    (x_train, y_train), _ = _data()
    model = _sequential()
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=1, verbose=0)
    bias, bias_name = model.layers[0].bias.numpy(), f"{model.layers[0].name}/bias"  # dense, or dense_N
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"))
    receiver = build_parsing_serving_input_receiver_fn({"input_layer": tf.io.FixedLenFeature([10], tf.float32)})
    # no checkpoint in model_dir yet: the export reads the Keras weights, as TF did
    path = est.export_saved_model(str(tmp_path / "e1"), receiver)
    np.testing.assert_allclose(tf.train.load_variable(f"{path}/variables/variables", bias_name), bias)
    est.train(_input_fn(x_train, y_train, epochs=None, batch=16), steps=_TRAIN // 16)
    path = est.export_saved_model(str(tmp_path / "e2"), receiver)
    assert not np.allclose(tf.train.load_variable(f"{path}/variables/variables", bias_name), bias)

    inputs = {"a": tf_keras.Input(shape=(1,), name="a"), "b": tf_keras.Input(shape=(1,), name="b")}
    outputs = {"c": tf_keras.layers.Dense(1, name="c")(inputs["a"]),
               "d": tf_keras.layers.Dense(1, name="d", activation="sigmoid")(inputs["b"])}
    two = tf_keras.Model(inputs=inputs, outputs=outputs)
    two.compile("sgd", {"c": "mse", "d": "binary_crossentropy"})
    est = model_to_estimator(keras_model=two, model_dir=str(tmp_path / "two"),
                             export_outputs={"c": RegressionOutput, "d": ClassificationOutput})
    spec = {"a": tf.io.FixedLenFeature([1], tf.float32), "b": tf.io.FixedLenFeature([1], tf.float32)}
    path = est.export_saved_model(str(tmp_path / "e3"), build_parsing_serving_input_receiver_fn(spec))
    assert {"c", "d", "serving_default"} <= set(tf.saved_model.load(path).signatures)
    with pytest.raises(FormattedKeyError, match="Missed keys"):
        model_to_estimator(keras_model=two, model_dir=str(tmp_path / "bad"),
                           export_outputs={"c": RegressionOutput, "p": ClassificationOutput})


def test_saved_model_file_tf1_optimizer_and_subclassed_model(tmp_path):
    (x_train, y_train), (x_test, y_test) = _data()
    model = _sequential()
    model.compile(loss="categorical_crossentropy", optimizer="rmsprop", metrics=["categorical_accuracy"])
    model.fit(x_train, y_train, epochs=1, verbose=0)
    keras_pred = np.argmax(model.predict(x_test, verbose=0), -1)
    model.save(str(tmp_path / "keras_model.h5"))
    est = model_to_estimator(keras_model_path=str(tmp_path / "keras_model.h5"), model_dir=str(tmp_path / "m"))
    est_pred = [np.argmax(p[model.layers[-1].name]) for p in est.predict(_input_fn(x_test))]
    np.testing.assert_array_equal(est_pred, keras_pred)

    model = _sequential()
    model.compile(loss="categorical_crossentropy", optimizer=tf.compat.v1.train.RMSPropOptimizer(1e-3))
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "v1"))
    est.train(_input_fn(x_train, y_train, epochs=None, batch=16), steps=3)
    assert est.get_variable_value("global_step") == 3
    assert any("RMSProp" in name for name in est.get_variable_names())  # the v1 optimizer's own slots

    class SimpleModel(tf_keras.Model):
        def __init__(self):
            super().__init__()
            self.dense1 = tf_keras.layers.Dense(16, activation="relu")
            self.dense2 = tf_keras.layers.Dense(_CLASSES, activation="softmax")

        def call(self, inputs):
            return self.dense2(self.dense1(inputs))

        def get_config(self):
            return {}

        @classmethod
        def from_config(cls, config):
            return cls()

    sub = SimpleModel()
    sub.compile(loss="categorical_crossentropy", optimizer=tf.compat.v1.train.RMSPropOptimizer(1e-3))
    est = model_to_estimator(keras_model=sub, model_dir=str(tmp_path / "sub"), checkpoint_format="saver")
    train = _input_fn({"input_1": x_train}, y_train, epochs=None, batch=16)
    est.train(train, steps=1)  # a subclassed model starts from fresh weights, as in TF
    kernel = est.get_variable_value("simple_model/dense/kernel")
    est.train(train, steps=_TRAIN // 16)
    assert est.get_variable_value("global_step") == 1 + _TRAIN // 16
    assert not np.allclose(est.get_variable_value("simple_model/dense/kernel"), kernel)  # it trained
    assert np.isfinite(est.evaluate(_input_fn(x_test, {"output_1": y_test}), steps=1)["loss"])


def test_model_dir_conflict_and_the_compile_arguments_fence(tmp_path):
    from toolkit._compat.tf_keras import compile_arguments
    from toolkit.estimator import RunConfig

    model = _sequential()
    model.compile(loss="categorical_crossentropy", optimizer="rmsprop", metrics=["mse"])
    assert compile_arguments(model)["metrics"] == ["mse"]  # tf_keras keeps them unserialized
    with pytest.raises(ValueError, match="`model_dir` are set both in constructor and `RunConfig`"):
        model_to_estimator(keras_model=model, model_dir=str(tmp_path / "a"),
                           config=RunConfig(model_dir=str(tmp_path / "b")))


@pytest.mark.parametrize("k", [keras, tf_keras], ids=["keras3", "tf_keras"])
def test_layer_state_updates_run_with_each_training_step(tmp_path, k):
    x = (np.random.RandomState(0).randn(256, 4) + 5).astype("float32")
    model = k.Sequential([k.Input((4,), name="x"), k.layers.BatchNormalization(momentum=0.5), k.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"))
    est.train(_input_fn({"x": x}, x[:, :1], epochs=None, batch=32), steps=20)
    # the batch-norm moving mean follows the data (mean 5) from its initial 0, as under Keras' fit
    assert est.get_variable_value(f"{model.layers[0].name}/moving_mean") == pytest.approx([5.0] * 4, abs=0.3)


def test_upstreams_multi_io_model_with_a_string_input_and_lambda_layers(tmp_path):
    """upstream's multi_inputs_multi_outputs_model and do_test_multi_inputs_multi_outputs_with_input_fn."""
    k = tf_keras
    input_a = k.layers.Input(shape=(16,), name="input_a")
    input_b = k.layers.Input(shape=(16,), name="input_b")
    input_m = k.layers.Input(shape=(8,), dtype="string", name="input_m")
    dense = k.layers.Dense(8, name="dense_1")
    interm_m = k.layers.Lambda(tf.strings.to_number)(input_m)
    interm_s = k.layers.Lambda(lambda t: t[0] * t[1])([interm_m, dense(input_a)])
    merged = k.layers.concatenate([interm_s, dense(input_b)], name="merge")
    model = k.models.Model(inputs=[input_a, input_b, input_m],
                           outputs=[k.layers.Dense(3, activation="softmax", name="dense_2")(merged),
                                    k.layers.Dense(2, activation="softmax", name="dense_3")(merged)])
    model.compile(loss="categorical_crossentropy", optimizer="rmsprop",
                  metrics={"dense_2": "categorical_accuracy", "dense_3": "categorical_accuracy"})
    (a, b, c, d), (a_test, b_test, c_test, d_test) = _multi_io_data()
    (m, _), (m_test, _) = get_test_data(_TRAIN, 50, (8,), 2, _SEED)
    features = {"input_a": a, "input_b": b, "input_m": m.astype(str)}
    test_features = {"input_a": a_test, "input_b": b_test, "input_m": m_test.astype(str)}
    keras_pred = model.predict([a_test, b_test, m_test.astype(str)], verbose=0)

    est = model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"))
    predicted = list(est.predict(lambda: tf.data.Dataset.from_tensors(test_features)))[:50]
    np.testing.assert_allclose([p["dense_2"] for p in predicted], keras_pred[0], atol=1e-5)  # the Lambdas rebuilt
    baseline = est.evaluate(lambda: (test_features, {"dense_2": c_test, "dense_3": d_test}), steps=1)
    est.train(lambda: (features, {"dense_2": c, "dense_3": d}), steps=_TRAIN // 16)
    after = est.evaluate(lambda: (test_features, {"dense_2": c_test, "dense_3": d_test}), steps=1)
    assert after["loss"] < baseline["loss"], (baseline, after)
