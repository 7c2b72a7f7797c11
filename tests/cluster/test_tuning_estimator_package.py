"""A tuning job over a Cloud ML Engine trainer package whose task.py calls tf.estimator.train_and_evaluate.

The package is written the way CMLE's published Estimator samples were (a
``trainer`` package with ``task.py`` and ``model.py``, hyphenated flags,
``--job-dir`` plus the trial number from TF_CONFIG as the output path, a
``FinalExporter``); its only change is the documented import line. Each trial
runs on a master + worker + ps cluster; its metric is the ``accuracy`` the
master's evaluation writes to ``eval/`` (on CMLE the service read it from those
summaries), so nothing in the trainer is tuning code.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from _study import submit_study

from toolkit.jobs import JobState, JobStore
from toolkit.jobs.engines.local._procs import is_alive
from toolkit.jobs.tuning import read_objective

pytestmark = pytest.mark.cluster

_CONFIG = """\
trainingInput:
  scaleTier: CUSTOM
  masterType: standard
  workerType: standard
  workerCount: 1
  parameterServerType: standard
  parameterServerCount: 1
  pythonModule: trainer.task
  args: ["--train-steps", "40"]
  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: accuracy
    maxTrials: 2
    maxParallelTrials: 2
    params:
      - parameterName: learning-rate
        type: DOUBLE
        minValue: 0.02
        maxValue: 0.2
        scaleType: UNIT_LOG_SCALE
      - parameterName: first-layer-size
        type: INTEGER
        minValue: 4
        maxValue: 16
        scaleType: UNIT_LINEAR_SCALE
"""

_MODEL = '''\
"""The model and its input functions (as a CMLE sample's trainer/model.py)."""
import numpy as np
import toolkit.compat.v1 as tf

INPUT_COLUMNS = [tf.feature_column.numeric_column("x", shape=(4,))]


def _data(seed):
    x = np.random.RandomState(seed).normal(size=(512, 4)).astype("float32")
    return {"x": x}, (x[:, 0] + x[:, 1] > 0).astype("int64")


def train_input_fn():
    features, labels = _data(0)
    return tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(512, seed=1).repeat().batch(32)


def eval_input_fn():
    features, labels = _data(1)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(128)


def serving_input_fn():
    x = tf.placeholder(tf.float32, [None, 4])
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def build_estimator(config, first_layer_size, learning_rate):
    return tf.estimator.DNNClassifier(
        feature_columns=INPUT_COLUMNS, hidden_units=[first_layer_size],
        optimizer=tf.train.AdamOptimizer(learning_rate), config=config)
'''

_TASK = '''\
"""Trains and evaluates the model (as a CMLE sample's trainer/task.py)."""
import argparse
import json
import os

import toolkit.compat.v1 as tf

from trainer import model


def run_experiment(args):
    train_spec = tf.estimator.TrainSpec(model.train_input_fn, max_steps=args.train_steps)
    exporter = tf.estimator.FinalExporter("census", model.serving_input_fn)
    eval_spec = tf.estimator.EvalSpec(model.eval_input_fn, steps=None, exporters=[exporter],
                                      name="census-eval", start_delay_secs=0, throttle_secs=0)
    run_config = tf.estimator.RunConfig(model_dir=args.job_dir, save_checkpoints_steps=20)
    estimator = model.build_estimator(run_config, args.first_layer_size, args.learning_rate)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--train-steps", type=int, default=1000)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--first-layer-size", type=int, default=8)
    args = parser.parse_args()
    # as the samples did: each hyperparameter trial writes under its own trial id
    trial = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("trial", "")
    args.job_dir = os.path.join(args.job_dir, trial)
    tf.logging.set_verbosity(tf.logging.INFO)
    run_experiment(args)
'''


def _package(root: Path) -> Path:
    trainer = root / "trainer"
    trainer.mkdir(parents=True)
    (trainer / "__init__.py").write_text("")
    (trainer / "model.py").write_text(_MODEL)
    (trainer / "task.py").write_text(_TASK)
    return trainer


def test_tuning_a_train_and_evaluate_package_on_master_worker_ps(tmp_path, monkeypatch, no_orphans):
    home = tmp_path / "home"
    monkeypatch.setenv("TFDIST_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hptuning_config.yaml").write_text(_CONFIG)
    record, trials = submit_study(home, "census-hp", _package(tmp_path / "src"), timeout=300, poll=1)
    store = JobStore(home)
    assert [t.state for t in trials] == [JobState.SUCCEEDED] * 2

    output = record.details["trainingOutput"]
    assert output["completedTrialCount"] == 2
    for doc in output["trials"]:
        trial_id = doc["trialId"]
        model_dir = tmp_path / "study" / trial_id / trial_id      # --job-dir <study>/<n>, then the trial id
        # every trial ran the whole cluster with its sampled flags
        task_names = [name for name, _, _ in store.task_processes(f"census-hp-trial-{trial_id}")]
        assert sorted(task_names) == ["master-0", "ps-0", "worker-0"], task_names
        assert 0.02 <= doc["hyperparameters"]["learning-rate"] <= 0.2
        assert 4 <= doc["hyperparameters"]["first-layer-size"] <= 16
        # the master evaluated (its eval summaries are the metric) and exported, as tf.estimator's run_master
        value, step = read_objective(tmp_path / "study" / trial_id, "accuracy", goal="MAXIMIZE")
        assert doc["finalMetric"] == {"trainingStep": step, "objectiveValue": pytest.approx(value)}
        assert step >= 40 and 0.5 < value <= 1.0, (step, value)
        assert any((model_dir / "eval_census-eval").glob("events.out.tfevents.*"))
        exports = sorted((model_dir / "export" / "census").glob("*/saved_model.pb"))
        assert len(exports) == 1, exports
        last = re.search(r'^model_checkpoint_path: "model.ckpt-(\d+)"', (model_dir / "checkpoint").read_text(), re.M)
        assert last and int(last.group(1)) >= 40   # (asynchronous ps training may overshoot max_steps by a step)
    best = output["bestTrial"]
    assert best["finalMetric"]["objectiveValue"] == max(t["finalMetric"]["objectiveValue"] for t in output["trials"])

    pids = [store.supervisor("census-hp").pid] + [p for t in trials for _, p, _ in store.task_processes(t.name)]
    deadline = time.monotonic() + 30
    while any(is_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(is_alive(p) for p in pids)
