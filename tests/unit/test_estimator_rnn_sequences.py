"""RNNClassifier / RNNEstimator with return_sequences=True: one prediction per valid time step."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("tf_keras")  # the optional `estimator` extra

from toolkit.estimator.canned import CannedError
from toolkit.estimator.experimental import RNNClassifier, RNNEstimator
from toolkit.estimator.head import BinaryClassHead, MultiHead, RegressionHead

RNG = np.random.default_rng(3)
N, T = 96, 5
LENGTHS = RNG.integers(2, T + 1, size=N)
VALUES = RNG.normal(size=(N, T)).astype(np.float32)
VALID = np.arange(T)[None, :] < LENGTHS[:, None]
SEQ = [tf.feature_column.sequence_numeric_column("x")]
PADDING = 1000.0   # what padded label steps hold: counted, it would dominate any loss


def _ragged(values, dtype):
    return tf.ragged.constant([values[i, :n] for i, n in enumerate(LENGTHS)], dtype=dtype).to_sparse()


def _input_fn(labels, *, repeat, extra=None):
    def fn():
        features = {"x": _ragged(VALUES, tf.float32), **(extra or {})}
        ds = tf.data.Dataset.from_tensor_slices((features, labels() if callable(labels) else labels))
        return (ds.repeat() if repeat else ds).batch(32)
    return fn


def _adam():
    return tf.compat.v1.train.AdamOptimizer(0.05)


def test_classifier_predicts_every_step_and_marks_the_padding(tmp_path):
    step_classes = (VALUES > 0).astype(np.int64)
    labels = lambda: _ragged(step_classes, tf.int64)  # noqa: E731  (sparse labels: valid steps only)
    est = RNNClassifier(SEQ, units=[8], return_sequences=True, optimizer=_adam, model_dir=str(tmp_path))
    est.train(_input_fn(labels, repeat=True), max_steps=120)
    metrics = est.evaluate(_input_fn(labels, repeat=False))
    assert metrics["accuracy"] > 0.9, metrics

    predictions = list(est.predict(_input_fn(labels, repeat=False)))
    assert len(predictions) == N
    hits = total = 0
    for i, p in enumerate(predictions):
        assert p["sequence_mask"].tolist() == VALID[i, :len(p["sequence_mask"])].tolist()
        assert p["class_ids"].shape[0] == len(p["sequence_mask"])   # one class per step (padded to the batch)
        n = LENGTHS[i]
        hits += int(np.sum(p["class_ids"][:n, 0] == step_classes[i, :n]))
        total += n
    assert hits / total > 0.9


def test_regression_loss_counts_only_valid_steps_with_per_step_weights(tmp_path):
    targets = np.where(VALID, 2.0 * VALUES, PADDING).astype(np.float32)        # dense labels, padded
    weights = np.where(VALID, RNG.uniform(0.5, 2.0, size=(N, T)), 0.0).astype(np.float32)
    extra = {"w": weights}
    head = RegressionHead(weight_column="w")
    est = RNNEstimator(head, SEQ, units=8, cell_type="gru", return_sequences=True, optimizer=_adam,
                       model_dir=str(tmp_path))
    est.train(_input_fn(targets, repeat=True, extra=extra), max_steps=60)

    # T == the longest length, so every batch pads to T and dense labels line up with the mask
    assert LENGTHS.max() == T
    metrics = est.evaluate(_input_fn(targets, repeat=False, extra=extra))
    predictions = list(est.predict(_input_fn(targets, repeat=False, extra=extra)))
    squared = weighted = 0.0
    for i, p in enumerate(predictions):
        n = LENGTHS[i]
        err = (p["predictions"][:n, 0] - targets[i, :n]) ** 2
        squared += float(np.sum(err * weights[i, :n]))
        weighted += float(np.sum(weights[i, :n]))
    assert metrics["average_loss"] == pytest.approx(squared / weighted, rel=1e-3)
    assert metrics["average_loss"] < 1.0     # had the padded 1000s counted, it would be ~1e5


def test_labels_that_do_not_match_the_steps_are_refused(tmp_path):
    est = RNNEstimator(BinaryClassHead(), SEQ, units=4, return_sequences=True, model_dir=str(tmp_path))
    short = np.zeros((N, 2), np.float32)        # two steps per sequence, but most are longer
    with pytest.raises(tf.errors.InvalidArgumentError, match="Tensor shape is incompatible with provided mask"):
        est.train(_input_fn(short, repeat=True), max_steps=1)
    with pytest.raises(CannedError, match="one value per time step") as info:
        est.train(_input_fn(np.zeros((N,), np.float32), repeat=True), max_steps=1)
    assert info.value.field == "labels"


def test_what_a_per_step_head_cannot_be_is_refused():
    with pytest.raises(CannedError, match="`MultiHead` is not supported with return_sequences") as info:
        RNNEstimator(MultiHead([RegressionHead(name="a"), RegressionHead(name="b")]), SEQ, units=4,
                     return_sequences=True)
    assert info.value.field == "head"
    with pytest.raises(CannedError, match="`sequence_mask` column must be a string"):
        RNNClassifier(SEQ, units=4, return_sequences=True, sequence_mask=3)
    with pytest.raises(CannedError, match="`return_sequences` is 'yes'"):
        RNNClassifier(SEQ, units=4, return_sequences="yes")
