"""The Estimator under ``RunConfig(train_distribute=...)``, with TensorFlow's published Estimator code.

* "Multi-worker training with Estimator": MultiWorkerMirroredStrategy on a workers-only TF_CONFIG
  (worker 0 is the chief, as TF's distribute coordinator made it); every task exits 0, the workers
  end with the same weights, and those are the chief's checkpoint at ``max_steps``.
* The same tutorial with an ``evaluator`` task beside the two workers: the workers train, the evaluator
  evaluates the chief's checkpoints as ``train_and_evaluate`` did, ends with the final one, and exits 0.
* The Estimator guide's distribution section: MirroredStrategy on 2 logical CPUs takes the same
  steps as one device on the global batch; so does CentralStorageStrategy (one copy of each variable,
  on the CPU, and model_fn on both replicas); ``model_to_estimator`` under MirroredStrategy starts from the
  Keras model's weights.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tf_config import generate

_ROOT = Path(__file__).resolve().parents[2]
_SCRIPTS = Path(__file__).resolve().parent / "_scripts"
_TIMEOUT = 300


@pytest.mark.cluster
def test_mwms_tutorial_on_two_workers_without_a_chief(tmp_path, no_orphans, forked_hand_cluster, quiet_tf):
    import tensorflow as tf

    model_dir, out = tmp_path / "model", tmp_path / "out"
    out.mkdir()
    steps = 30
    for cfg in generate(chief=0, workers=2, ps=0):
        forked_hand_cluster.start(f"worker-{cfg.task_index}", [str(_SCRIPTS / "estimator_mwms_tutorial.py"),
                                                              str(model_dir), str(out), str(steps)], cfg.to_json())
    codes = {name: code for name, (code, _) in forked_hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: forked_hand_cluster.log(name) for name in forked_hand_cluster.procs}
    assert codes == {"worker-0": 0, "worker-1": 0}, {n: logs[n][-3000:] for n in logs}
    for name in logs:  # each worker stepped `steps` synchronous steps with both replicas
        assert f"replicas in sync: 2 steps run: {steps}" in logs[name], logs[name][-2000:]
    final = {name: np.load(out / f"{name}.npy") for name in logs}
    np.testing.assert_allclose(final["worker-0"], final["worker-1"], rtol=1e-6)
    checkpoint = tf.train.latest_checkpoint(str(model_dir))
    assert checkpoint and checkpoint.endswith(f"model.ckpt-{steps}")
    names = sorted(name for name, _ in tf.train.list_variables(checkpoint)
                   if "global_step" not in name and "/" in name)
    saved = np.concatenate([tf.train.load_variable(checkpoint, name).ravel() for name in names])
    assert sorted(saved.tolist()) == pytest.approx(sorted(final["worker-0"].tolist()), rel=1e-6)


@pytest.mark.cluster
def test_mwms_tutorial_with_an_evaluator_task(tmp_path, no_orphans, forked_hand_cluster, quiet_tf):
    model_dir, out = tmp_path / "model", tmp_path / "out"
    out.mkdir()
    steps = 20
    for cfg in generate(chief=0, workers=2, ps=0, evaluator=1):
        forked_hand_cluster.start(f"{cfg.task_type}-{cfg.task_index}",
                                  [str(_SCRIPTS / "estimator_mwms_tutorial.py"), str(model_dir), str(out), str(steps),
                                   "0"], cfg.to_json())
    codes = {name: code for name, (code, _) in forked_hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: forked_hand_cluster.log(name) for name in forked_hand_cluster.procs}
    assert codes == {"worker-0": 0, "worker-1": 0, "evaluator-0": 0}, {n: logs[n][-3000:] for n in logs}
    for name in ("worker-0", "worker-1"):  # the evaluator is no replica: the workers still train 2 in sync
        assert f"replicas in sync: 2 steps run: {steps}" in logs[name], logs[name][-2000:]
    assert sorted(p.name for p in out.glob("*.npy")) == ["worker-0.npy", "worker-1.npy"]  # the evaluator trained not
    results = [line for line in logs["evaluator-0"].splitlines() if line.startswith("RESULT ")]
    assert results, logs["evaluator-0"][-3000:]
    evaluated = json.loads(results[-1][len("RESULT "):])
    # the evaluator's last evaluation is the chief's final checkpoint, on a model that learned (chance: ln 10)
    assert evaluated["global_step"] == steps and 0 < evaluated["loss"] < 2.31, evaluated
    assert list((model_dir / "eval").glob("events.out.tfevents.*")), "the evaluator wrote its summaries"


@pytest.mark.cluster
def test_mirrored_and_central_storage_equal_one_device_on_the_global_batch(tmp_path, quiet_tf):
    done = subprocess.run([sys.executable, str(_SCRIPTS / "estimator_mirrored.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=_TIMEOUT, cwd=_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    runs = {line["name"]: line for line in lines if "name" in line}
    assert runs["mirrored"]["step"] == runs["single"]["step"] == 20  # one global step per synchronous step
    np.testing.assert_allclose(runs["mirrored"]["weights"], runs["single"]["weights"], rtol=1e-4, atol=1e-5)
    # CentralStorageStrategy: model_fn on both replicas, one copy of each variable on CPU:0, the same updates
    assert (runs["central"]["replicas"], runs["mirrored"]["replicas"], runs["single"]["replicas"]) == (2, 2, 1)
    assert runs["central"]["devices"] == ["/device:CPU:0"] and len(runs["mirrored"]["devices"]) == 2, runs
    assert runs["central"]["step"] == 20
    np.testing.assert_allclose(runs["central"]["weights"], runs["single"]["weights"], rtol=1e-4, atol=1e-5)
    first = np.asarray(runs["mirrored"]["weights"])
    assert np.abs(first).sum() > 0
    report = next(line for line in lines if "eval" in line)
    # input_fn got an InputContext: one input pipeline feeding 2 replicas (and 1 without a strategy)
    assert report["contexts"][:2] == [[1, 2], [1, 2]] and report["eval"]["global_step"] == 20
    assert report["eval"]["loss"] > 0 and report["eval"]["mae"] > 0
    # model_to_estimator under MirroredStrategy: one step away from the Keras model's own weights
    keras_run = next(line["keras"] for line in lines if "keras" in line)
    assert keras_run["step"] == 1 and 0 < keras_run["moved"] < 0.01 and keras_run["eval"] > 0, keras_run
