"""experimental.RNNClassifier / RNNEstimator: learn small sequence problems, evaluate, predict; bad input refused."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator.canned import CannedError
from toolkit.estimator.canned.rnn import RNNClassifier, RNNEstimator  # served as toolkit.estimator.experimental.*
from toolkit.estimator.head import RegressionHead

RNG = np.random.default_rng(0)
N, T = 256, 6
LENGTHS = RNG.integers(2, T + 1, size=N)
VALUES = RNG.normal(size=(N, T)).astype(np.float32)
CONTEXT = RNG.normal(size=(N, 1)).astype(np.float32)
# the class is the sign of each sequence's LAST valid step (lengths vary from 2 to 6)
LAST = VALUES[np.arange(N), LENGTHS - 1]
CLASSES = (LAST > 0).astype(np.int64).reshape(-1, 1)


def _ragged() -> tf.SparseTensor:
    rows = [VALUES[i, :n] for i, n in enumerate(LENGTHS)]
    return tf.ragged.constant(rows, dtype=tf.float32).to_sparse()


def _input_fn(labels: np.ndarray, *, repeat: bool, batch: int = 32):
    def fn():
        features = {"x": _ragged(), "c": tf.constant(CONTEXT)}
        ds = tf.data.Dataset.from_tensor_slices((features, labels))
        return (ds.repeat() if repeat else ds).batch(batch)
    return fn


def _adam():
    return tf.compat.v1.train.AdamOptimizer(0.05)


SEQ = [tf.feature_column.sequence_numeric_column("x")]


def test_rnn_classifier_learns_the_last_valid_step_and_predicts(tmp_path):
    est = RNNClassifier(SEQ, units=[8], cell_type="gru", optimizer=_adam, model_dir=str(tmp_path))
    est.train(_input_fn(CLASSES, repeat=True), max_steps=200)
    metrics = est.evaluate(_input_fn(CLASSES, repeat=False, batch=64))
    assert metrics["global_step"] == 200
    assert metrics["accuracy"] > 0.9, metrics
    preds = list(est.predict(_input_fn(CLASSES, repeat=False, batch=64)))
    assert len(preds) == N
    hits = np.mean([int(p["class_ids"][0]) == int(c) for p, c in zip(preds, CLASSES[:, 0], strict=True)])
    assert hits > 0.9
    names = est.get_variable_names()
    assert any(n.startswith("rnn_model/") and "logits" in n for n in names), names


def test_rnn_estimator_with_context_and_lstm_regresses(tmp_path):
    target = (LAST[:, None] + 2.0 * CONTEXT).astype(np.float32)
    est = RNNEstimator(RegressionHead(), SEQ, context_feature_columns=[tf.feature_column.numeric_column("c")],
                       units=8, cell_type="lstm", optimizer=_adam, model_dir=str(tmp_path))
    before = float(np.mean((target - target.mean()) ** 2))
    est.train(_input_fn(target, repeat=True), max_steps=200)
    loss = est.evaluate(_input_fn(target, repeat=False, batch=64))["average_loss"]
    assert loss < 0.1 * before, (loss, before)
    first = next(iter(est.predict(_input_fn(target, repeat=False, batch=64))))
    assert first["predictions"].shape == (1,)


def test_rnn_cell_fn_builds_the_callers_cells(tmp_path):
    import tf_keras
    est = RNNClassifier(SEQ, rnn_cell_fn=lambda: [tf_keras.layers.SimpleRNNCell(4), tf_keras.layers.SimpleRNNCell(3)],
                        n_classes=3, optimizer=_adam, model_dir=str(tmp_path))
    labels = np.minimum(2, (LAST > -0.5).astype(np.int64) + (LAST > 0.5)).reshape(-1, 1)
    est.train(_input_fn(labels, repeat=True), max_steps=5)
    shapes = [est.get_variable_value(n).shape for n in est.get_variable_names() if n.endswith("logits/kernel")]
    assert shapes == [(3, 3)]   # the last cell's 3 units -> 3 classes


@pytest.mark.parametrize("kwargs, phrase", [
    (dict(units=None), "`units` is None"),
    (dict(units=[8, 0]), "`units` is [8, 0]"),
    (dict(units=8, cell_type="rnn"),
     "`cell_type` is 'rnn'; supported cell types are ['basic_rnn', 'gru', 'lstm', 'simple_rnn']"),
    (dict(units=8, rnn_cell_fn=lambda: None),
     "units and cell_type must not be specified when using rnn_cell_fn (got units=8, cell_type='basic_rnn')"),
    (dict(units=8, optimizer="Adamax"), "`optimizer` is 'Adamax'"),
    (dict(units=8, n_classes=1), "n_classes"),
])
def test_rnn_classifier_refuses_bad_arguments(kwargs, phrase):
    with pytest.raises(CannedError) as info:
        RNNClassifier(SEQ, **kwargs)
    assert phrase in str(info.value)


def test_rnn_refuses_non_sequence_columns_and_bad_heads():
    with pytest.raises(CannedError, match="not a sequence column"):
        RNNClassifier([tf.feature_column.numeric_column("x")], units=4)
    with pytest.raises(CannedError, match="`head` is str"):
        RNNEstimator("regression", SEQ, units=4)


def test_served_as_tf_estimator_experimental():
    from toolkit.estimator import experimental
    assert experimental.RNNClassifier is RNNClassifier and experimental.RNNEstimator is RNNEstimator


def test_padding_does_not_change_a_sequences_logits(tmp_path):
    """Steps past a sequence's length are masked: padding it to a longer neighbour's length changes nothing."""
    est = RNNClassifier(SEQ, units=4, optimizer=_adam, model_dir=str(tmp_path))
    est.train(_input_fn(CLASSES, repeat=True), max_steps=1)
    short, long = [0.5, -1.0], [0.3, 0.2, -0.4, 1.5, 2.0, -2.0]

    def logits(rows):
        fn = lambda: tf.data.Dataset.from_tensor_slices(  # noqa: E731
            {"x": tf.ragged.constant(rows, dtype=tf.float32).to_sparse()}).batch(len(rows))
        return [float(p["logits"][0]) for p in est.predict(fn)]

    alone, padded = logits([short])[0], logits([short, long])[0]
    assert padded == pytest.approx(alone, abs=1e-5)


def test_named_optimizer_and_cell_class_train(tmp_path):
    """'Adagrad' by name trains at upstream's rate (0.05, gradients clipped to 5); a cell class builds the cells."""
    import tf_keras
    est = RNNClassifier(SEQ, units=[8], cell_type=tf_keras.layers.GRUCell, model_dir=str(tmp_path))
    assert isinstance(est, RNNEstimator)
    est.train(_input_fn(CLASSES, repeat=True), max_steps=300)
    assert est.evaluate(_input_fn(CLASSES, repeat=False, batch=64))["accuracy"] > 0.8
