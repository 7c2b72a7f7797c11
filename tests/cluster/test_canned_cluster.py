"""A canned estimator trained between-graph by TF_CONFIG (ps, chief, worker), written as TF 2 Estimator code.

The script is what a ``tf.estimator.DNNLinearCombinedClassifier`` user wrote, with ``tf.estimator`` replaced
by ``toolkit.estimator``: string labels through ``label_vocabulary`` (lookup tables in every client's graph),
``linear_model`` and DNN variables on the ps, a Keras optimizer translated to its TF1 twin.
"""
from __future__ import annotations

import re
import textwrap

import pytest

from tf_config import generate

_TIMEOUT = 240


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Each task forked from a process that imported TensorFlow once (conftest.py), not a fresh interpreter."""
    return forked_hand_cluster


_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import tensorflow as tf
    import keras
    from toolkit import estimator  # was: from tensorflow import estimator

    fc = tf.feature_column
    rng = np.random.RandomState(0)
    x = rng.randn(512, 2).astype("float32")
    city = rng.choice(["a", "b", "c"], 512)
    labels = np.where(x[:, 0] - x[:, 1] + np.where(city == "a", 1.5, 0.0) > 0.3, "yes", "no")

    def input_fn(repeat):
        ds = tf.data.Dataset.from_tensor_slices(({"x": x, "city": city}, labels))
        return ds.shuffle(512, seed=1).repeat().batch(32) if repeat else ds.batch(512)

    CITY = fc.categorical_column_with_vocabulary_list("city", ["a", "b", "c"])
    classifier = estimator.DNNLinearCombinedClassifier(
        model_dir=sys.argv[1], linear_feature_columns=[CITY], linear_optimizer=keras.optimizers.Ftrl(0.3),
        dnn_feature_columns=[fc.numeric_column("x", shape=(2,)), fc.embedding_column(CITY, 2)],
        dnn_hidden_units=[8], dnn_optimizer=tf.compat.v1.train.AdamOptimizer(0.05), label_vocabulary=["no", "yes"],
        config=estimator.RunConfig(save_checkpoints_steps=100))
    classifier.train(lambda: input_fn(True), max_steps=200)
    if classifier.config.is_chief:
        metrics = classifier.evaluate(lambda: input_fn(False))
        print("evaluated global_step=%d accuracy=%.3f auc=%.3f" % (metrics["global_step"], metrics["accuracy"],
                                                                    metrics["auc"]))
''')


@pytest.mark.cluster
def test_wide_and_deep_classifier_on_ps_chief_worker(tmp_path, no_orphans, hand_cluster, quiet_tf):
    import tensorflow as tf

    script, model_dir = tmp_path / "wide_deep.py", tmp_path / "model"
    script.write_text(_SCRIPT)
    for cfg in generate(chief=1, workers=1, ps=1):
        hand_cluster.start(f"{cfg.task_type}-{cfg.task_index}", [str(script), str(model_dir)], cfg.to_json())
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert codes == {name: 0 for name in hand_cluster.procs}, {n: logs[n][-3000:] for n in logs if codes.get(n) != 0}
    found = re.search(r"evaluated global_step=(\d+) accuracy=([0-9.]+) auc=([0-9.]+)", logs["chief-0"])
    assert found, logs["chief-0"][-3000:]
    assert int(found.group(1)) >= 200 and float(found.group(2)) > 0.85 and float(found.group(3)) > 0.9
    checkpoint = tf.train.latest_checkpoint(str(model_dir))
    names = {name for name, _ in tf.train.list_variables(checkpoint)}
    assert {"linear/linear_model/city/weights", "dnn/hiddenlayer_0/kernel", "global_step"} <= names
