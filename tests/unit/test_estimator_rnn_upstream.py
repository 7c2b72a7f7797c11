"""experimental.RNNClassifier on cases of tensorflow/estimator's ``canned/rnn_test.py`` (public API only).

Ported from upstream's test (Copyright The TensorFlow Authors, Apache License 2.0): its ``create_checkpoint``
helper, which writes a checkpoint under upstream's variable names ('rnn_model/rnn/kernel', ...), then
``RNNClassifierEvaluationTest.testBinaryClassEvaluationMetrics`` (upstream's exact metric figures from that
checkpoint; then TF1's ``export_savedmodel``, which upstream's RNN estimators kept) and
``RNNClassifierTrainingTest.testBinaryClassFromScratchWithDefaultOptimizer`` (stacked cells on a
batch of one sparse sequence; the checkpoint holds upstream's names and shapes, 'kernel' then 'kernel_1').
"""
from __future__ import annotations

import pytest
import tensorflow as tf

from toolkit.estimator.experimental import RNNClassifier
from toolkit.estimator.export import build_parsing_serving_input_receiver_fn

CELL_KERNEL_NAME = "rnn_model/rnn/kernel"
CELL_RECURRENT_KERNEL_NAME = "rnn_model/rnn/recurrent_kernel"
CELL_BIAS_NAME = "rnn_model/rnn/bias"
LOGITS_WEIGHTS_NAME = "rnn_model/logits/kernel"
LOGITS_BIAS_NAME = "rnn_model/logits/bias"


def create_checkpoint(kernel, recurrent, bias, dense_kernel, dense_bias, global_step, model_dir):
    """Upstream's helper: a checkpoint with the given RNN weights under upstream's variable names."""
    weights = {CELL_KERNEL_NAME: kernel, CELL_RECURRENT_KERNEL_NAME: recurrent, CELL_BIAS_NAME: bias,
               LOGITS_WEIGHTS_NAME: dense_kernel, LOGITS_BIAS_NAME: dense_bias}
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.Variable(value, name=name, dtype=tf.float32)
        assign = tf.compat.v1.train.create_global_step().assign(global_step)
        with tf.compat.v1.train.MonitoredTrainingSession(checkpoint_dir=model_dir) as sess:
            sess.run(assign)


def test_upstream_binary_class_evaluation_metrics_from_upstream_checkpoint(tmp_path):
    create_checkpoint(kernel=[[.1, -.2]], recurrent=[[.2, -.3], [.3, -.4]], bias=[.2, .5],
                      dense_kernel=[[-1.], [1.]], dense_bias=[0.3], global_step=100, model_dir=str(tmp_path))
    columns = [tf.feature_column.sequence_numeric_column("price", shape=(1,))]
    est = RNNClassifier(units=[2], sequence_feature_columns=columns, model_dir=str(tmp_path))

    def eval_input_fn():
        return {"price": tf.sparse.SparseTensor(values=[10., 5., 2.], indices=[[0, 0], [0, 1], [1, 0]],
                                                dense_shape=[2, 2])}, [[0], [1]]

    metrics = est.evaluate(eval_input_fn, steps=1)
    # upstream's figures: logits [[-0.603282], [0.019719]], loss (0.436326 + 0.683335) / 2
    expected = {"global_step": 100, "loss": 0.559831, "average_loss": 0.559831, "accuracy": 1.0,
                "prediction/mean": 0.429262, "label/mean": 0.5, "accuracy_baseline": 0.5, "recall": 1.0,
                "precision": 1.0, "auc": 1.0, "auc_precision_recall": 1.0}
    assert sorted(metrics) == sorted(expected)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    # upstream's RNN estimators keep TF1's export_savedmodel (its _test_complete_flow exports with it)
    spec = tf.feature_column.make_parse_example_spec(columns)
    export_dir = est.export_savedmodel(str(tmp_path / "export"), build_parsing_serving_input_receiver_fn(spec))
    assert tf.io.gfile.exists(f"{export_dir.decode() if isinstance(export_dir, bytes) else export_dir}/saved_model.pb")


def test_upstream_binary_class_from_scratch_stacked_cells_checkpoint_names(tmp_path):
    def train_input_fn():
        return {"tokens": tf.sparse.SparseTensor(values=["the", "cat", "sat"], indices=[[0, 0], [0, 1], [0, 2]],
                                                 dense_shape=[1, 3])}, [[1]]

    col = tf.feature_column.sequence_categorical_column_with_hash_bucket("tokens", hash_bucket_size=10)
    est = RNNClassifier(sequence_feature_columns=[tf.feature_column.embedding_column(col, dimension=2)],
                        units=[4, 2], n_classes=2, model_dir=str(tmp_path))
    est.train(input_fn=train_input_fn, steps=2)

    shapes = dict(tf.train.list_variables(str(tmp_path)))
    assert tf.train.load_variable(str(tmp_path), "global_step") == 2
    input_units = 2
    for i, cell_unit in enumerate([4, 2]):
        suffix = f"_{i}" if i else ""
        assert shapes[CELL_KERNEL_NAME + suffix] == [input_units, cell_unit]
        assert shapes[CELL_RECURRENT_KERNEL_NAME + suffix] == [cell_unit, cell_unit]
        assert shapes[CELL_BIAS_NAME + suffix] == [cell_unit]
        input_units = cell_unit
    assert shapes[LOGITS_WEIGHTS_NAME] == [2, 1]
    assert shapes[LOGITS_BIAS_NAME] == [1]


def test_upstream_numpy_input_fn_optimizer_instance_made_in_a_graph(tmp_path):
    """``BaseRNNClassificationIntegrationTest.testNumpyInputFnOptimizerInstance`` in upstream's graph mode: the
    ``tf_keras`` Adam is made inside a TF1 graph, where its learning rate is a variable ``get_config`` cannot read."""
    import numpy as np
    import tf_keras

    from toolkit.compat.v1 import estimator as v1_estimator

    numpy_input_fn = v1_estimator.inputs.numpy_input_fn

    n_classes, batch_size = 3, 10
    rng = np.random.RandomState(0)
    words = ["dog", "cat", "bird", "the", "a", "sat", "flew", "slept"]
    x_data = np.array([rng.choice(words, 3, replace=False) for _ in range(batch_size)])
    y_data = rng.randint(n_classes, size=batch_size)
    col = tf.feature_column.sequence_categorical_column_with_hash_bucket("tokens", hash_bucket_size=10)
    with tf.Graph().as_default():
        optimizer = tf_keras.optimizers.Adam()
        assert isinstance(optimizer.learning_rate, tf.Variable)
        est = RNNClassifier(sequence_feature_columns=[tf.feature_column.embedding_column(col, dimension=2)],
                            units=[4, 2], n_classes=n_classes, model_dir=str(tmp_path), optimizer=optimizer)
        est.train(numpy_input_fn(x={"tokens": x_data}, y=y_data, batch_size=batch_size, num_epochs=None,
                                 shuffle=True), steps=10)
        scores = est.evaluate(numpy_input_fn(x={"tokens": x_data}, y=y_data, batch_size=batch_size, shuffle=False))
        assert scores["global_step"] == 10 and "loss" in scores
        probabilities = [p["probabilities"] for p in est.predict(
            numpy_input_fn(x={"tokens": x_data}, batch_size=batch_size, shuffle=False))]
        assert np.array(probabilities).shape == (batch_size, n_classes)
    # Adam's slots in the checkpoint: the v1 twin of the graph-made Keras Adam trained
    names = [name for name, _ in tf.train.list_variables(str(tmp_path))]
    assert any(name.endswith("/Adam") for name in names), names
