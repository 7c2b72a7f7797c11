"""The six canned estimators end to end on the graph engine: learn, evaluate, predict, export and serve."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("tf_keras")  # the optional `estimator` extra

import toolkit.estimator as est_lib
from toolkit.estimator import RunConfig
from toolkit.estimator.canned import (
    CannedError,
    DNNClassifier,
    DNNLinearCombinedClassifier,
    DNNLinearCombinedRegressor,
    DNNRegressor,
    LinearClassifier,
    LinearRegressor,
)
from toolkit.estimator.export import (
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
)

v1 = tf.compat.v1
fc = tf.feature_column
CITIES = ["a", "b", "c"]


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    return RunConfig(model_dir=str(tmp_path / "model"), tf_random_seed=1, tf_config={})


def _synthetic(n, seed):
    """Numeric x (2 values), a city, a binary label, a real-valued target and a 3-way class."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype("float32")
    city = rng.choice(CITIES, n)
    effect = np.select([city == "a", city == "b"], [1.5, -1.0], 0.0).astype("float32")
    score = x[:, 0] - x[:, 1] + effect
    return {"x": x, "city": city}, {"binary": (score > 0.3).astype("int64"), "target": (2 * score + 1)[:, None],
                                    "three": np.digitize(score, [-0.7, 0.9]).astype("int64")}


def _input_fn(features, labels, *, batch, repeat):
    def input_fn():
        ds = tf.data.Dataset.from_tensor_slices((dict(features), labels))
        return (ds.shuffle(256, seed=0).repeat() if repeat else ds).batch(batch)
    return input_fn


def _examples(features):
    rows = []
    for i in range(len(features["x"])):
        feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=features["x"][i])),
                   "city": tf.train.Feature(bytes_list=tf.train.BytesList(value=[features["city"][i].encode()]))}
        rows.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return tf.constant(rows)


X = fc.numeric_column("x", shape=(2,))
CITY = fc.categorical_column_with_vocabulary_list("city", CITIES)
SPEC = {"x": tf.io.FixedLenFeature([2], tf.float32), "city": tf.io.FixedLenFeature([1], tf.string)}


def test_dnn_classifier_learns_digits_and_serves_its_export(config, tmp_path):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x, y = (digits.data / 16.0).astype("float32"), digits.target.astype("int64")
    est = DNNClassifier(hidden_units=[32], feature_columns=[fc.numeric_column("pixels", shape=(64,))],
                        n_classes=10, optimizer=v1.train.AdamOptimizer(0.01), dropout=0.1, config=config)
    est.train(_input_fn({"pixels": x[:1400]}, y[:1400], batch=64, repeat=True), max_steps=250)
    metrics = est.evaluate(_input_fn({"pixels": x[1400:]}, y[1400:], batch=200, repeat=False))
    assert set(metrics) == {"accuracy", "average_loss", "loss", "global_step"}
    assert metrics["global_step"] == 250 and metrics["accuracy"] > 0.85
    assert {"dnn/hiddenlayer_0/kernel", "dnn/logits/bias"} <= set(est.get_variable_names())
    first = next(iter(est.predict(_input_fn({"pixels": x[1400:1405]}, y[1400:1405], batch=5, repeat=False),
                                  predict_keys=["probabilities", "class_ids", "classes"])))
    assert set(first) == {"probabilities", "class_ids", "classes"}
    assert first["classes"] == str(first["class_ids"][0]).encode()

    # warm-starting a new estimator from this one finds every variable under TF's canned names
    warm = DNNClassifier(hidden_units=[32], feature_columns=[fc.numeric_column("pixels", shape=(64,))], n_classes=10,
                         optimizer="SGD", warm_start_from=est.model_dir,
                         config=config.replace(model_dir=str(tmp_path / "warm")))
    warm.train(_input_fn({"pixels": x[:64]}, y[:64], batch=64, repeat=True), max_steps=1)
    np.testing.assert_allclose(warm.get_variable_value("dnn/hiddenlayer_0/kernel"),
                               est.get_variable_value("dnn/hiddenlayer_0/kernel"), atol=0.02)

    path = est.export_saved_model(str(tmp_path / "export"),
                                  build_raw_serving_input_receiver_fn({"pixels": tf.constant(x[:1])}))
    served = tf.saved_model.load(path).signatures["predict"](pixels=tf.constant(x[1400:1600]))
    assert (served["class_ids"].numpy()[:, 0] == y[1400:1600]).mean() > 0.85
    np.testing.assert_allclose(served["probabilities"].numpy()[0], first["probabilities"], rtol=1e-4, atol=1e-6)


def test_linear_classifier_with_label_vocabulary_and_weight_column(config, tmp_path):
    features, labels = _synthetic(600, seed=0)
    names = np.array(["no", "yes"])[labels["binary"]]
    # half of the training rows carry the wrong label and weight 0: only the weights let the model learn
    noisy = np.arange(600) % 2 == 1
    train_labels = np.where(noisy, np.array(["yes", "no"])[labels["binary"]], names)
    train_features = dict(features, w=np.where(noisy, 0.0, 1.0).astype("float32"))
    est = LinearClassifier([X, fc.bucketized_column(X, [-1.0, 0.0, 1.0]), CITY], n_classes=2,
                           label_vocabulary=["no", "yes"], weight_column="w", config=config)
    est.train(_input_fn(train_features, train_labels, batch=64, repeat=True), max_steps=200)
    eval_features, eval_labels = _synthetic(300, seed=1)
    eval_names = np.array(["no", "yes"])[eval_labels["binary"]]
    metrics = est.evaluate(_input_fn(dict(eval_features, w=np.ones(300, "float32")), eval_names, batch=300,
                                     repeat=False))
    assert {"accuracy", "accuracy_baseline", "auc", "auc_precision_recall", "average_loss", "label/mean",
            "precision", "prediction/mean", "recall", "loss", "global_step"} == set(metrics)
    assert metrics["accuracy"] > 0.9 and metrics["auc"] > 0.95
    assert metrics["label/mean"] == pytest.approx(eval_labels["binary"].mean(), abs=1e-6)
    assert metrics["accuracy_baseline"] == pytest.approx(max(metrics["label/mean"], 1 - metrics["label/mean"]))

    path = est.export_saved_model(str(tmp_path / "export"), build_parsing_serving_input_receiver_fn(SPEC))
    loaded = tf.saved_model.load(path)
    assert {"serving_default", "classification", "regression", "predict"} <= set(loaded.signatures)
    out = loaded.signatures["serving_default"](inputs=_examples({k: v[:100] for k, v in eval_features.items()}))
    best = np.array([b.decode() for b in out["classes"].numpy()[np.arange(100), out["scores"].numpy().argmax(1)]])
    assert (best == eval_names[:100]).mean() > 0.9
    assert set(out["classes"].numpy()[0]) == {b"no", b"yes"}


def test_a_label_outside_the_vocabulary_stops_training_with_the_vocabulary_named(config):
    features, _ = _synthetic(8, seed=0)
    est = LinearClassifier([X], label_vocabulary=["no", "yes"], config=config)
    with pytest.raises(Exception, match=r"not in label_vocabulary \[no, yes\]"):
        est.train(_input_fn(features, np.array(["no", "maybe"] * 4), batch=8, repeat=True), max_steps=2)


def test_combined_classifier_three_classes_with_vocabulary(config, tmp_path):
    features, labels = _synthetic(600, seed=2)
    vocab = ["low", "mid", "high"]
    est = DNNLinearCombinedClassifier(
        linear_feature_columns=[CITY, fc.bucketized_column(X, [-1.0, 0.0, 1.0])],
        linear_optimizer=v1.train.FtrlOptimizer(0.3),
        dnn_feature_columns=[X, fc.embedding_column(CITY, 2)], dnn_hidden_units=[16],
        dnn_optimizer=lambda: v1.train.AdamOptimizer(0.02), n_classes=3, label_vocabulary=vocab, config=config)
    names = np.array(vocab)[labels["three"]]
    est.train(_input_fn(features, names, batch=64, repeat=True), max_steps=250)
    metrics = est.evaluate(_input_fn(features, names, batch=600, repeat=False))
    assert metrics["global_step"] == 250 and metrics["accuracy"] > 0.85
    path = est.export_saved_model(str(tmp_path / "export"), build_parsing_serving_input_receiver_fn(SPEC))
    out = tf.saved_model.load(path).signatures["predict"](examples=_examples({k: v[:50] for k, v in
                                                                              features.items()}))
    assert (np.char.decode(out["classes"].numpy()[:, 0].astype(bytes)) == names[:50]).mean() > 0.85


@pytest.mark.parametrize("kind", ["dnn", "linear", "combined"])
def test_each_regressor_learns_and_serves_the_regression_signature(kind, config, tmp_path):
    features, labels = _synthetic(400, seed=3)
    target = labels["target"]
    make = {
        "dnn": lambda: DNNRegressor([16], [X, fc.indicator_column(CITY)], optimizer=v1.train.AdamOptimizer(0.03),
                                    config=config),
        "linear": lambda: LinearRegressor([X, CITY], optimizer="SGD", config=config),
        "combined": lambda: DNNLinearCombinedRegressor(
            linear_feature_columns=[CITY], linear_optimizer="SGD", dnn_feature_columns=[X], dnn_hidden_units=[8],
            dnn_optimizer=v1.train.AdamOptimizer(0.03), config=config),
    }
    est = make[kind]()  # 'SGD' by name: TF's linear estimators train it at 0.2, not Keras' 0.01
    est.train(_input_fn(features, target, batch=64, repeat=True), max_steps=200)
    metrics = est.evaluate(_input_fn(features, target, batch=400, repeat=False))
    assert set(metrics) == {"average_loss", "label/mean", "prediction/mean", "loss", "global_step"}
    assert metrics["average_loss"] < 0.15 * float(np.var(target))
    assert metrics["label/mean"] == pytest.approx(float(target.mean()), rel=1e-4)
    path = est.export_saved_model(str(tmp_path / "export"), build_parsing_serving_input_receiver_fn(SPEC))
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["regression"](inputs=_examples({k: v[:50] for k, v in features.items()}))
    assert float(np.mean((out["outputs"].numpy() - target[:50]) ** 2)) < 0.2 * float(np.var(target))


def test_canned_estimators_are_estimators_in_both_namespaces(config):
    assert est_lib.DNNClassifier is DNNClassifier and est_lib.LinearRegressor is LinearRegressor
    est = DNNRegressor([4], [X], config=config, label_dimension=2)
    assert isinstance(est, est_lib.Estimator) and est.head.logits_dimension == 2


@pytest.mark.parametrize("build, field, message", [
    (lambda: DNNClassifier([], [X]), "hidden_units", "`hidden_units` is empty; expected at least one hidden layer"),
    (lambda: DNNClassifier([8, 0], [X]), "hidden_units", r"`hidden_units\[1\]` is 0; expected a positive int"),
    (lambda: DNNClassifier([8], None), "feature_columns", "`feature_columns` is None; expected a non-empty list"),
    (lambda: DNNClassifier([8], [CITY]), "feature_columns",
     "categorical column 'city', which a DNN cannot take directly. Wrap it"),
    (lambda: DNNClassifier([8], [X], n_classes=1), "n_classes", "`n_classes` is 1; expected an integer >= 2"),
    (lambda: DNNClassifier([8], [X], optimizer="adam"), "optimizer",
     r"`optimizer` is 'adam', which is not an optimizer name; expected one of \['Adagrad', 'Adam', 'Ftrl'"),
    (lambda: DNNClassifier([8], [X], optimizer=object()), "optimizer",
     "a Keras Adagrad/Adam/Ftrl/RMSprop/SGD, or a function returning one of those"),
    (lambda: DNNClassifier([8], [X], dropout=1.5), "dropout", r"`dropout` is 1.5; expected None or the probability"),
    (lambda: DNNClassifier([8], [X], activation_fn="relu"), "activation_fn", "expected a function applied"),
    (lambda: LinearClassifier([X], n_classes=3, label_vocabulary=["a", "b"]), "label_vocabulary",
     r"`label_vocabulary` has 2 entries \['a', 'b'\] but `n_classes` is 3"),
    (lambda: LinearClassifier([X], label_vocabulary="ab"), "label_vocabulary", "expected a list or tuple of strings"),
    (lambda: LinearClassifier([X], label_vocabulary=[0, 1]), "label_vocabulary", "which are not strings"),
    (lambda: LinearClassifier([X], weight_column=3), "weight_column", "`weight_column` is int 3"),
    (lambda: LinearClassifier([X, X]), "feature_columns", r"names the column\(s\) \['x'\] more than once"),
    (lambda: LinearClassifier([X], loss_reduction="mean"), "loss_reduction", "`loss_reduction` is 'mean'"),
    (lambda: LinearRegressor([X], label_dimension=0), "label_dimension", "`label_dimension` is 0"),
    (lambda: LinearRegressor([X], sparse_combiner="max"), "sparse_combiner", "`sparse_combiner` is 'max'"),
    (lambda: DNNLinearCombinedClassifier(), "linear_feature_columns",
     "`linear_feature_columns` and `dnn_feature_columns` are both empty"),
    (lambda: DNNLinearCombinedRegressor(dnn_feature_columns=[X]), "dnn_hidden_units", "`dnn_hidden_units` is None"),
    (lambda: DNNLinearCombinedClassifier(linear_feature_columns=[CITY], linear_optimizer=v1.train.SyncReplicasOptimizer(
        v1.train.GradientDescentOptimizer(0.1), 2)), "linear_optimizer", "is a SyncReplicasOptimizer"),
])
def test_bad_constructor_input_is_refused_naming_the_argument(build, field, message):
    with pytest.raises(CannedError, match=message) as err:
        build()
    assert err.value.field == field


def test_canned_errors_belong_to_the_estimator_error_family():
    with pytest.raises(est_lib.EstimatorError, match="`n_classes` is 0") as err:
        LinearClassifier([X], n_classes=0)
    assert isinstance(err.value, ValueError) and err.value.field == "n_classes"


def test_tf1_scripts_get_the_v1_canned_estimators_and_tf2_code_the_tf2_ones():
    import toolkit.compat.v1 as tf1
    import toolkit.estimator
    from toolkit.estimator.canned import v1

    assert tf1.estimator.DNNClassifier is v1.DNNClassifier
    assert tf1.estimator.LinearRegressor is v1.LinearRegressor
    assert toolkit.estimator.DNNClassifier is not v1.DNNClassifier
    # tf.compat.v1.estimator.Estimator: TF 2's plus TF1's export_savedmodel, which TF 2's has not
    assert issubclass(tf1.estimator.Estimator, toolkit.estimator.Estimator)
    assert hasattr(tf1.estimator.Estimator, "export_savedmodel")
    assert tf1.estimator.ModeKeys.TRAIN == "train"
