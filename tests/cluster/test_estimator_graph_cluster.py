"""TF1-style Estimator scripts started by hand in every task of a TF_CONFIG cluster; every process exits 0.

The iris script is TensorFlow's published custom Estimator (``examples/tf1``) with only its import
line changed; ``model_dir`` comes from TF_CONFIG, as TF's RunConfig allowed.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tf_config import generate

_ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 240


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Each task forked from a process that imported TensorFlow once (conftest.py), not a fresh interpreter."""
    return forked_hand_cluster


@pytest.mark.cluster
def test_published_iris_estimator_on_ps_chief_worker_evaluator(tmp_path, no_orphans, hand_cluster, quiet_tf):
    import tensorflow as tf

    model_dir = tmp_path / "model"
    # the sample's own 1,000 steps: the published model, unseeded, ended a 300-step run at 0.667 accuracy once
    script = [str(_ROOT / "examples" / "tf1" / "train_and_evaluate.py"), "--train_steps", "1000"]
    for cfg in generate(chief=1, workers=1, ps=1, evaluator=1):
        doc = {**cfg.to_dict(), "model_dir": str(model_dir)}
        hand_cluster.start(f"{cfg.task_type}-{cfg.task_index}", script, json.dumps(doc))
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert codes == {name: 0 for name in hand_cluster.procs}, {n: logs[n][-3000:] for n in logs if codes.get(n) != 0}
    # between-graph: the chief and the worker each ran their own session against the ps
    assert re.search(r"chief-0: \d+ local steps", logs["chief-0"]) and re.search(r"worker-0: \d+ local steps",
                                                                                  logs["worker-0"])
    assert "the chief said goodbye; exiting with 0" in logs["ps-0"]
    evaluated = re.search(r"global_step=(\d+) accuracy=([0-9.]+)", logs["evaluator-0"])
    assert evaluated, logs["evaluator-0"][-3000:]
    assert int(evaluated.group(1)) >= 1000 and float(evaluated.group(2)) > 0.8, logs["evaluator-0"][-3000:]
    exports = sorted((model_dir / "export" / "iris").glob("*/saved_model.pb"))
    assert exports
    served = tf.saved_model.load(str(exports[-1].parent)).signatures["serving_default"]
    example = tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        for name, value in {"SepalLength": 5.1, "SepalWidth": 3.3, "PetalLength": 1.7, "PetalWidth": 0.5}.items()}))
    out = served(examples=tf.constant([example.SerializeToString()]))
    assert int(out["class_ids"].numpy()[0][0]) == 0  # Setosa


_SYNC_SCRIPT = '''
import sys
import numpy as np
import toolkit.compat.v1 as tf

MAX_STEPS = 60


def model_fn(features, labels, mode, config):
    logits = tf.layers.dense(tf.layers.dense(features, 16, activation=tf.nn.relu), 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    optimizer = tf.train.SyncReplicasOptimizer(tf.train.AdamOptimizer(0.01), replicas_to_aggregate=2,
                                               total_num_replicas=2)
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      training_hooks=[optimizer.make_session_run_hook(config.is_chief)])


x = np.random.RandomState(0).normal(size=(256, 4)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
estimator = tf.estimator.Estimator(model_fn, model_dir=sys.argv[1])
estimator.train(lambda input_context: tf.data.Dataset.from_tensor_slices((x, y)).shard(
    input_context.num_input_pipelines, input_context.input_pipeline_id).repeat().batch(32), max_steps=MAX_STEPS)
print(f"local steps {estimator.last_local_steps}", flush=True)  # one write: other threads print too
'''


@pytest.mark.cluster
def test_sync_replicas_model_fn_aggregates_two_contributions_per_step(tmp_path, no_orphans, hand_cluster, quiet_tf):
    import tensorflow as tf

    script = tmp_path / "sync_model.py"
    script.write_text(_SYNC_SCRIPT)
    for cfg in generate(chief=1, workers=1, ps=1):
        hand_cluster.start(f"{cfg.task_type}-{cfg.task_index}", [str(script), str(tmp_path / "model")], cfg.to_json())
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert codes == {name: 0 for name in hand_cluster.procs}, {n: logs[n][-3000:] for n in logs if codes.get(n) != 0}
    local = [int(re.search(r"local steps (\d+)", logs[name]).group(1)) for name in ("chief-0", "worker-0")]
    step = int(tf.train.load_variable(tf.train.latest_checkpoint(str(tmp_path / "model")), "global_step"))
    assert step == 60
    # every global step aggregates two contributions (asynchronous training would count one per local
    # step, 60 in all); contributions that arrive for a step already taken are dropped as stale, so the
    # sum is at least 120, more on a loaded machine
    assert sum(local) >= 120 and min(local) > 0, local


_DELAYED_WORKER_SCRIPT = '''
import logging
import sys
import time
import numpy as np
import toolkit.compat.v1 as tf

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def model_fn(features, labels, mode):
    loss = tf.losses.sparse_softmax_cross_entropy(labels, tf.layers.dense(features, 2))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn():
    return tf.data.Dataset.from_tensor_slices((np.zeros((8, 4), "float32"), np.zeros(8, "int64"))).repeat().batch(4)


# the job's training is over already (a checkpoint at max_steps, written without TF_CONFIG)...
tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(model_dir=sys.argv[1], tf_config={})).train(
    input_fn, max_steps=3)
# ...when worker-0 of the cluster in TF_CONFIG starts, late, with TF's start schedule
estimator = tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(
    model_dir=sys.argv[1], experimental_max_worker_delay_secs=2))
start = time.monotonic()
tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(input_fn, max_steps=3),
                                tf.estimator.EvalSpec(input_fn, steps=1))
print(f"worker-0 returned after {time.monotonic() - start:.1f} s", flush=True)
'''


@pytest.mark.cluster
def test_a_worker_waits_with_its_server_up_when_asked_and_a_late_one_reports_done(tmp_path, no_orphans,
                                                                                 hand_cluster, quiet_tf):
    import time

    from strategies._net import is_listening

    script = tmp_path / "delayed_worker.py"
    script.write_text(_DELAYED_WORKER_SCRIPT)
    worker = next(cfg for cfg in generate(chief=1, workers=1, ps=1) if cfg.task_type == "worker")
    hand_cluster.start("worker-0", [str(script), str(tmp_path / "model")], worker.to_json())
    address, listened, deadline = worker.cluster["worker"][0], False, time.monotonic() + 60
    while not listened and time.monotonic() < deadline and "worker-0 returned" not in hand_cluster.log("worker-0"):
        listened = is_listening(address, timeout=0.2)  # its server is up while it waits: no task waits on it
        time.sleep(0.1)
    (code, _), = hand_cluster.wait(_TIMEOUT).values()
    log = hand_cluster.log("worker-0")
    assert code == 0 and listened, log[-3000:]
    # TF's schedule, min(experimental_max_worker_delay_secs, (index + 1) * 5) seconds; then the checkpoint is at
    # max_steps already, so it trains nothing and tells the chief it is done (the chief is gone here: skipped)
    assert "Waiting 2 secs before starting training." in log and "skipping training" in log, log[-3000:]
    assert "chief-0 is already gone; no done-worker-0 signal for it" in log, log[-3000:]
    assert float(re.search(r"worker-0 returned after ([\d.]+) s", log).group(1)) >= 2.0
