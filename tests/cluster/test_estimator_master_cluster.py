"""CMLE's ``master`` task under train_and_evaluate: it trains with the workers and evaluates and exports.

A master + worker + ps cluster started by hand, as CMLE starts a trainer package: the master evaluates
each new checkpoint and runs the exporters (the final export included), as tf.estimator's run_master.
"""
from __future__ import annotations

import json

import pytest

from tf_config import generate

_TIMEOUT = 180


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Each task forked from a process that imported TensorFlow once (conftest.py), not a fresh interpreter."""
    return forked_hand_cluster


_SCRIPT = '''
import json, sys
import numpy as np
import toolkit.compat.v1 as tf

MAX_STEPS = 60


def model_fn(features, labels, mode):
    logits = tf.layers.dense(features["x"], 2)
    predictions = {"class_ids": tf.argmax(logits, 1)}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops={
        "accuracy": tf.metrics.accuracy(labels, predictions["class_ids"])})


x = np.random.RandomState(0).normal(size=(256, 4)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
train = lambda: tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(32)
evaluate = lambda: tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(64)
receiver = tf.estimator.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 4])})
estimator = tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(model_dir=sys.argv[1],
                                                                         save_checkpoints_steps=20))
result, exports = tf.estimator.train_and_evaluate(
    estimator, tf.estimator.TrainSpec(train, max_steps=MAX_STEPS),
    tf.estimator.EvalSpec(evaluate, steps=None, throttle_secs=0, start_delay_secs=0,
                          exporters=[tf.estimator.LatestExporter("latest", receiver, exports_to_keep=None),
                                     tf.estimator.FinalExporter("final", receiver)]))
print("RESULT", json.dumps({"result": {k: float(v) for k, v in (result or {}).items()}, "exports": exports}),
      flush=True)
'''


@pytest.mark.cluster
def test_master_trains_evaluates_every_checkpoint_and_exports(tmp_path, no_orphans, hand_cluster, quiet_tf):
    script = tmp_path / "trainer.py"
    script.write_text(_SCRIPT)
    model_dir = tmp_path / "model"
    for cfg in generate(chief=1, workers=1, ps=1):
        doc = cfg.to_dict()
        doc["cluster"]["master"] = doc["cluster"].pop("chief")
        task_type = "master" if cfg.task_type == "chief" else cfg.task_type
        doc["task"] = {"type": task_type, "index": cfg.task_index}
        hand_cluster.start(f"{task_type}-{cfg.task_index}", [str(script), str(model_dir)], json.dumps(doc))
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert codes == {name: 0 for name in hand_cluster.procs}, {n: logs[n][-3000:] for n in logs if codes.get(n) != 0}
    report = json.loads(logs["master-0"].split("RESULT ", 1)[1].splitlines()[0])
    assert report["result"]["global_step"] >= 60 and report["result"]["accuracy"] > 0.8, report
    # evaluated on the checkpoints as they were written (throttle_secs=0), not only at the end
    from toolkit.estimator.hooks.early_stopping import read_eval_metrics

    evaluated = list(read_eval_metrics(str(model_dir / "eval")))
    assert len(evaluated) >= 2 and evaluated[-1] >= 60, evaluated
    final = sorted((model_dir / "export" / "final").glob("*/saved_model.pb"))
    latest = sorted((model_dir / "export" / "latest").glob("*/saved_model.pb"))
    assert len(final) == 1 and len(latest) >= 2, (final, latest)
    assert sorted(report["exports"]) == sorted(str(p.parent) for p in final + latest)


@pytest.mark.cluster
def test_master_and_parameter_servers_without_workers_train_on_the_master(tmp_path, no_orphans, quiet_tf):
    """A CMLE CUSTOM config may set parameterServerCount and no workerCount: the master trains alone on the ps.

    The same trainer under ``tfdist launch`` with ``chief=1, workers=0, ps=1``: it trains, evaluates and exports.
    """
    from toolkit.launcher import launch

    script = tmp_path / "trainer.py"
    script.write_text(_SCRIPT)
    model_dir = tmp_path / "model"
    result = launch(["python", str(script), str(model_dir)], job_dir=tmp_path / "job", chief=1, workers=0, ps=1,
                    dialect="cmle", timeout=_TIMEOUT, echo=False)
    assert sorted(task.name for task in result.tasks) == ["master-0", "ps-0"]
    text = result.task("master-0").log_path.read_text(errors="replace")
    assert result.ok, (result.message, text[-3000:])
    report = json.loads(text.split("RESULT ", 1)[1].splitlines()[0])
    assert report["result"]["global_step"] >= 60 and report["result"]["accuracy"] > 0.8, report
    assert len(sorted((model_dir / "export" / "final").glob("*/saved_model.pb"))) == 1
