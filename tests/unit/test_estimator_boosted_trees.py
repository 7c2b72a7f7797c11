"""Boosted trees: upstream's toy problems give upstream's results; a real tabular set is learnt; the extras.

The toy data is upstream boosted_trees_test's five examples of three features, bucketized at
(-2, 0.5, 12); the tabular set is scikit-learn's bundled breast-cancer data (569 x 30).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator import BoostedTreesClassifier, BoostedTreesRegressor, RunConfig
from toolkit.estimator.canned._errors import CannedError

fc = tf.feature_column
_FEATURES = {"f_0": np.array([12.5, 1.0, -2.001, -2.0001, -1.999], np.float32),
             "f_1": np.array([2.0, -3.0, 0.5, 0.0, 0.4995], np.float32),
             "f_2": np.array([3.0, 20.0, 50.0, -100.0, 102.75], np.float32)}
_BUCKETIZED = [fc.bucketized_column(fc.numeric_column(k), [-2.0, 0.5, 12.0]) for k in sorted(_FEATURES)]


def _config(tmp_path):
    return RunConfig(model_dir=str(tmp_path), tf_config={})


def _toy(labels):
    return lambda: (dict(_FEATURES), np.array(labels, np.float32))


def test_a_tree_of_depth_five_takes_five_steps_and_fits_upstreams_toy_classification(tmp_path):
    input_fn = _toy([[0.0], [1.0], [1.0], [0.0], [0.0]])
    est = BoostedTreesClassifier(_BUCKETIZED, n_batches_per_layer=1, n_trees=1, max_depth=5,
                                 config=_config(tmp_path))
    est.train(input_fn, steps=100)  # stops by itself: one layer per step, one tree
    assert est.get_variable_value("global_step") == 5
    assert est.evaluate(input_fn, steps=1)["accuracy"] == 1.0


def test_upstreams_two_tree_toy_regression_ends_at_upstreams_loss(tmp_path):
    est = BoostedTreesRegressor(_BUCKETIZED, n_batches_per_layer=1, n_trees=2, max_depth=5, config=_config(tmp_path))
    est.train(_toy([[1.5], [0.3], [0.2], [2.0], [5.0]]), steps=100)  # stops after 2 trees of 5 layers
    assert est.get_variable_value("global_step") == 10
    # upstream's testTrainAndEvaluateRegressor: every layer moves every example by a Newton step, also where the
    # node has one example left (a zero-gain split), as TF's kernels did with pruning_mode='none'
    result = est.evaluate(_toy([[1.5], [0.3], [0.2], [2.0], [5.0]]), steps=1)
    assert result["average_loss"] == pytest.approx(1.008551, abs=1e-5)


def test_an_indicator_column_that_defines_the_labels_is_learnt_exactly(tmp_path):
    labels = np.array([[0.0], [5.7], [5.7], [0.0], [0.0]], np.float32)
    color = fc.indicator_column(fc.categorical_column_with_vocabulary_list("c", ("bad", "good", "ok")))
    noise = fc.bucketized_column(fc.numeric_column("noise"), [-2.0, 0.5, 12.0])

    def input_fn():
        return {"noise": np.ones(5, np.float32), "c": np.array(["bad", "good", "good", "ok", "bad"])}, labels

    est = BoostedTreesRegressor([noise, color], n_batches_per_layer=1, n_trees=1, max_depth=1, learning_rate=1.0,
                                config=_config(tmp_path))
    est.train(input_fn, steps=1)
    assert est.evaluate(input_fn, steps=1)["loss"] == pytest.approx(0.0, abs=1e-6)
    predict_fn = lambda: tf.data.Dataset.from_tensors(input_fn()[0])  # noqa: E731 (one batch, then done)
    assert np.allclose([p["predictions"] for p in est.predict(predict_fn)], labels)
    assert list(est.experimental_feature_importances(normalize=True).items()) == [("c", 1.0), ("noise_bucketized", 0.0)]


def test_breast_cancer_numeric_columns_quantiles_importances_and_explanations(tmp_path):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x, y = data.data.astype(np.float32), data.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(y))
    train, test = order[:400], order[400:]
    columns = [fc.numeric_column("x", shape=(x.shape[1],))]
    est = BoostedTreesClassifier(columns, n_batches_per_layer=1, n_trees=20, max_depth=3, center_bias=True,
                                 train_in_memory=True, config=_config(tmp_path))
    est.train(lambda: tf.data.Dataset.from_tensors(({"x": x[train]}, y[train])).repeat(), max_steps=500)
    steps = est.get_variable_value("global_step")
    assert 20 * 3 < steps < 20 * 3 + 20  # a quantile step, a few bias steps, then one layer per step
    result = est.evaluate(lambda: ({"x": x[test]}, y[test]), steps=1)
    assert result["accuracy"] >= 0.93 and result["auc"] >= 0.97
    importances = est.experimental_feature_importances(normalize=True)
    assert list(importances) == ["x"] and importances["x"] == pytest.approx(1.0)
    explained = list(est.experimental_predict_with_explanations(
        lambda: tf.data.Dataset.from_tensors({"x": x[test[:5]]})))
    assert len(explained) == 5
    for p in explained:
        assert p["bias"] == pytest.approx(y[train].mean(), abs=0.02)        # center_bias: the class prior
        assert p["bias"] + sum(p["dfc"].values()) == pytest.approx(float(p["probabilities"][1]), abs=1e-4)


def test_a_three_class_classifier_and_a_regressor_learn(tmp_path):
    rng = np.random.RandomState(1)
    x = rng.uniform(-1, 1, size=(300, 2)).astype(np.float32)
    classes = np.digitize(x[:, 0], [-0.3, 0.3]).astype(np.int64)
    columns = [fc.numeric_column("x", shape=(2,))]
    classifier = BoostedTreesClassifier(columns, n_batches_per_layer=2, n_classes=3, n_trees=5, max_depth=2,
                                        config=_config(tmp_path / "c"))
    def halves():  # two batches of 150: n_batches_per_layer=2 grows a layer from both
        return tf.data.Dataset.from_tensor_slices(({"x": x}, classes)).batch(150).repeat()

    classifier.train(halves, max_steps=200)
    assert classifier.evaluate(lambda: ({"x": x}, classes), steps=1)["accuracy"] >= 0.95
    target = (x[:, 0] ** 2 + 0.5 * x[:, 1]).astype(np.float32)
    regressor = BoostedTreesRegressor(columns, n_batches_per_layer=1, n_trees=30, max_depth=3, learning_rate=0.3,
                                      config=_config(tmp_path / "r"))
    regressor.train(lambda: ({"x": x}, target), max_steps=500)
    assert regressor.evaluate(lambda: ({"x": x}, target), steps=1)["average_loss"] < 0.1 * target.var()


def test_bad_arguments_are_refused_by_name():
    column = fc.numeric_column("x")
    with pytest.raises(CannedError, match="n_trees > 0") as info:
        BoostedTreesClassifier([column], n_batches_per_layer=1, n_trees=0)
    assert info.value.field == "n_trees"
    with pytest.raises(CannedError, match="center_bias not yet support with n_classes > 2"):
        BoostedTreesClassifier([column], n_batches_per_layer=1, n_classes=3, center_bias=True)
    with pytest.raises(CannedError, match="n_batches_per_layer should be set as 1"):
        BoostedTreesClassifier([column], n_batches_per_layer=2, train_in_memory=True)
    with pytest.raises(CannedError, match="indicator_column"):
        BoostedTreesRegressor([fc.categorical_column_with_identity("c", 3)], n_batches_per_layer=1)
    with pytest.raises(CannedError, match="tree_complexity must be positive"):
        BoostedTreesRegressor([column], n_batches_per_layer=1, pruning_mode="pre")
