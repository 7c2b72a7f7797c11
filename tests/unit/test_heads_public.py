"""The public heads (toolkit.estimator.BinaryClassHead & co.): loss, metrics, predictions, specs, errors.

Every expected value is worked out by hand in the comment beside it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator import (
    BinaryClassHead,
    EstimatorError,
    LogisticRegressionHead,
    MultiClassHead,
    MultiHead,
    MultiLabelHead,
    PoissonRegressionHead,
    RegressionHead,
)
from toolkit.estimator.head import HeadError

v1 = tf.compat.v1


def _results(metrics):
    return {k: float(m.result()) for k, m in metrics.items()}


def test_binary_head_loss_and_metrics_eagerly():
    head = BinaryClassHead()
    logits = np.array([[45.0], [-41.0]], np.float32)
    labels = np.array([[1], [1]], np.int32)
    # sigmoid cross-entropy: 0 for logit 45 with label 1, 41 for logit -41; mean over 2 examples = 20.5
    assert float(head.loss(labels, logits)) == pytest.approx(20.5)
    got = _results(head.update_metrics(head.metrics(), {}, logits, labels))
    # one of two predicted right; the one predicted positive is positive; one of two positives found
    assert got == pytest.approx({"average_loss": 20.5, "accuracy": 0.5, "precision": 1.0, "recall": 0.5,
                                 "prediction/mean": 0.5, "label/mean": 1.0, "accuracy_baseline": 1.0,
                                 "auc": 0.0, "auc_precision_recall": 1.0})


def test_binary_head_weights_sum_reduction_thresholds_and_name():
    head = BinaryClassHead(weight_column="w", loss_reduction="sum", thresholds=[0.5], name="b")
    logits = np.array([[45.0], [-41.0]], np.float32)
    labels = np.array([[1], [1]], np.int32)
    features = {"w": np.array([[1.0], [2.0]], np.float32)}
    # weighted sum: 1 * 0 + 2 * 41 = 82
    assert float(head.loss(labels, logits, features=features)) == pytest.approx(82.0)
    got = _results(head.update_metrics(head.metrics(), features, logits, labels))
    # weighted mean loss 82 / 3; weighted accuracy 1 / 3
    assert got["average_loss/b"] == pytest.approx(82.0 / 3)
    assert got["accuracy/b"] == pytest.approx(1.0 / 3)
    assert got["recall/positive_threshold_0.5/b"] == pytest.approx(1.0 / 3)


def test_binary_head_predictions_with_vocabulary():
    head = BinaryClassHead(label_vocabulary=["aang", "iroh"])
    preds = head.predictions(np.array([[0.3], [-0.4]], np.float32))
    np.testing.assert_allclose(preds["logistic"].numpy(), [[1 / (1 + math.exp(-0.3))], [1 / (1 + math.exp(0.4))]],
                               rtol=1e-6)
    assert preds["class_ids"].numpy().tolist() == [[1], [0]]
    assert preds["classes"].numpy().tolist() == [[b"iroh"], [b"aang"]]
    assert preds["all_classes"].numpy().tolist() == [[b"aang", b"iroh"]] * 2


def test_multi_class_head_loss_metrics_and_vocabulary():
    head = MultiClassHead(3, label_vocabulary=["a", "b", "c"])
    logits = np.array([[10.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    labels = np.array([["a"], ["c"]])
    # example 1: -log(e^10 / (e^10 + 2)); example 2: -log(1/3)
    first = -math.log(math.exp(10) / (math.exp(10) + 2))
    expected = (first + math.log(3)) / 2
    assert float(head.loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    got = _results(head.update_metrics(head.metrics(), {}, logits, labels))
    # argmax of the second row is class 0 ('a'), its label is 'c': one of two right
    assert got == pytest.approx({"average_loss": expected, "accuracy": 0.5}, rel=1e-5)
    assert head.predictions(logits)["classes"].numpy().tolist() == [[b"a"], [b"a"]]


def test_regression_heads_loss_and_predictions():
    logits = np.array([[1.0], [2.0]], np.float32)
    labels = np.array([[3.0], [2.0]], np.float32)
    # squared errors 4 and 0, mean 2
    assert float(RegressionHead().loss(labels, logits)) == pytest.approx(2.0)
    got = _results(RegressionHead().update_metrics(RegressionHead().metrics(), {}, logits, labels))
    assert got == pytest.approx({"average_loss": 2.0, "label/mean": 2.5, "prediction/mean": 1.5})
    # Poisson: exp(logit) - label * logit (+ Stirling term for labels > 1)
    poisson = PoissonRegressionHead(compute_full_loss=False)
    expected = ((math.e - 3.0) + (math.exp(2) - 4.0)) / 2
    assert float(poisson.loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    assert poisson.predictions(logits)["predictions"].numpy()[0, 0] == pytest.approx(math.e, rel=1e-6)
    logistic = LogisticRegressionHead()
    assert logistic.predictions(np.zeros((1, 1), np.float32))["predictions"].numpy()[0, 0] == pytest.approx(0.5)


def test_estimator_spec_in_a_graph_runs_metrics_and_trains():
    head = BinaryClassHead()
    with tf.Graph().as_default():
        logits = tf.constant([[45.0], [-41.0]])
        labels = tf.constant([[1], [1]])
        spec = head.create_estimator_spec(features={}, mode="eval", logits=logits, labels=labels)
        var = tf.Variable(1.0)
        train = head.create_estimator_spec(features={}, mode="train", logits=logits * var, labels=labels,
                                           train_op_fn=lambda loss: v1.assign_add(var, 1.0))
        assert set(train.export_outputs or {}) == set()
        pred = head.create_estimator_spec(features={}, mode="infer", logits=logits)
        assert set(pred.export_outputs) == {"serving_default", "classification", "regression", "predict"}
        with v1.Session() as sess:
            spec.scaffold.finalize()
            sess.run([spec.scaffold.init_op, spec.scaffold.local_init_op])
            sess.run({k: u for k, (_, u) in spec.eval_metric_ops.items()})
            values = sess.run({k: v for k, (v, _) in spec.eval_metric_ops.items()})
            sess.run(train.train_op)
            assert sess.run(var) == 2.0
    assert values["accuracy"] == pytest.approx(0.5) and values["average_loss"] == pytest.approx(20.5)


def test_bad_arguments_raise_tfs_phrases_in_the_house_style():
    with pytest.raises(HeadError, match=r"thresholds not in \(0, 1\)") as err:
        BinaryClassHead(thresholds=[0.0])
    assert err.value.field == "thresholds" and isinstance(err.value, EstimatorError)
    with pytest.raises(ValueError, match="Invalid loss_reduction: none"):
        RegressionHead(loss_reduction="none")
    with pytest.raises(ValueError, match=r"loss_fn has unexpected args: \['name'\]"):
        RegressionHead(loss_fn=lambda labels, logits, name: labels)
    with pytest.raises(ValueError, match="n_classes must be > 2"):
        MultiClassHead(2)
    with pytest.raises(TypeError, match="Weight column must be either a string or NumericColumn"):
        BinaryClassHead(weight_column=3).loss(np.ones((1, 1)), np.ones((1, 1), np.float32), features={})
    with pytest.raises(ValueError, match="Mismatched label shape"):
        BinaryClassHead().loss(np.ones((2, 2)), np.ones((2, 1), np.float32))
    with pytest.raises(ValueError, match=r"Labels must be <= 2 - 1"):
        BinaryClassHead().loss(np.array([[2.0]]), np.ones((1, 1), np.float32))
    with pytest.raises(ValueError, match="You must provide a labels Tensor"):
        BinaryClassHead().loss(None, np.ones((1, 1), np.float32))


def _sigmoid_ce(label, logit):
    return math.log(1 + math.exp(-logit)) if label else math.log(1 + math.exp(logit))


def test_multi_label_head_loss_metrics_and_sparse_labels():
    head = MultiLabelHead(3, classes_for_class_based_metrics=[1])
    logits = np.array([[-1.0, 1.0, 2.0], [1.0, -1.0, 0.0]], np.float32)
    labels = np.array([[0, 1, 1], [1, 0, 0]])
    # per example: the mean of the three sigmoid cross-entropies; then the mean over the batch
    rows = [sum(_sigmoid_ce(y, z) for y, z in zip(ys, zs, strict=True)) / 3
            for ys, zs in zip(labels, logits, strict=True)]
    expected = sum(rows) / 2
    assert float(head.loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    sparse = tf.SparseTensor([[0, 0], [0, 1], [1, 0]], np.array([1, 2, 0], np.int64), [2, 2])
    assert float(head.loss(sparse, logits)) == pytest.approx(expected, rel=1e-5)
    got = _results(head.update_metrics(head.metrics(), {}, logits, labels))
    # class 1's probabilities: sigmoid(1), sigmoid(-1): mean 0.5; every positive outscores every negative
    assert got["probability_mean/class1"] == pytest.approx(0.5)
    assert got["auc"] == pytest.approx(1.0) and got["average_loss"] == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="n_classes must be > 1 for multi-label"):
        MultiLabelHead(1)


def test_multi_head_sums_named_losses_and_merges_exports():
    head = MultiHead([MultiClassHead(3, name="a"), BinaryClassHead(name="b")], head_weights=[1.0, 2.0])
    logits = np.array([[1.0, 2.0, 3.0, 0.5]], np.float32)
    labels = {"a": np.array([[2]]), "b": np.array([[1]])}
    a = -math.log(math.exp(3) / (math.exp(1) + math.exp(2) + math.exp(3)))
    b = _sigmoid_ce(1, 0.5)
    assert float(head.loss(labels, logits)) == pytest.approx(a + 2 * b, rel=1e-5)
    assert head.logits_dimension == 4 and head.name == "a_b"
    with tf.Graph().as_default():
        spec = head.create_estimator_spec(features={}, mode="infer", logits=tf.constant(logits))
        assert ("b", "logistic") in spec.predictions
        assert {"serving_default", "predict", "a/classification", "b/regression"} <= set(spec.export_outputs)
    with pytest.raises(ValueError, match="All given heads must have name specified"):
        MultiHead([BinaryClassHead()])
    with pytest.raises(ValueError, match=r"labels has missing values for head\(s\): \['b'\]"):
        head.loss({"a": np.array([[2]])}, logits)


def test_binary_head_in_a_graph_refuses_labels_for_another_batch_at_once():
    with tf.Graph().as_default(), pytest.raises(HeadError, match="logits and labels must have the same shape"):
        BinaryClassHead().loss(np.zeros((3, 1)), np.zeros((2, 1), np.float32))
