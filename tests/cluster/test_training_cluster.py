"""``toolkit.fit`` on real local clusters started by the launcher.

Every task runs this file as a script (``python test_training_cluster.py
--model-dir ...``); ``fit`` gives each task its role. Four jobs:

1. MultiWorkerMirrored, chief + worker: the final weights of both workers are
   identical and equal one process training on the global batch.
2. The same job, but the chief dies mid-epoch on its first start; the launcher
   restarts the whole cluster, which resumes from the last checkpoint and ends
   with the same weights as the uninterrupted job.
3. ParameterServer with 1 ps and 1 worker, dropout on: the same weights and
   losses as one process (each step fetches the variables and sends the
   gradients as one tensor per ps; the dropout seed state advances as it
   would locally). Its ``validation_fn`` calls ``.numpy()``, which only
   works eagerly, so no worker can run it: validation falls back to the chief,
   says so once, and gives the one process's validation metrics.
4. ParameterServer with 2 ps, 2 workers, the chief coordinating and an
   evaluator sidecar: loss falls, the global step equals the steps scheduled,
   the learning-rate schedule follows it, variables live on both ps, every
   server exits by itself, and the evaluator evaluates the final checkpoint.
   The two workers validate (a shard each), and the chief's last validation
   equals the evaluator's one-process evaluation of the final checkpoint.
5. Between-graph steps (``between_graph=True``), 1 ps and 1 worker: the worker
   runs its own graph-mode loop on the chief's variables, and the losses,
   validation and weights equal one process's (Keras' Adam on the ps).
6. fit's default runner under parameter servers (between-graph steps), 2 ps and
   2 workers, 4 steps per execution, SGD with momentum on a schedule and
   dropout: the workers' steps add up to exactly the steps the chief released,
   every checkpoint lands on its step, loss falls, the workers validate, and
   every task exits 0.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_EXAMPLES = 1280  # 20 global batches of 64: shards of both workers stay aligned with one process's batches
_BATCH = 64
_TIMEOUT = 240
_REPO = Path(__file__).resolve().parents[2]


def _parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=15)
    parser.add_argument("--steps-per-execution", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, default=6)
    parser.add_argument("--crash-at-step", type=int, default=0)
    parser.add_argument("--schedule", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--eager-validation", action="store_true")
    parser.add_argument("--between-graph", action="store_true")
    parser.add_argument("--default-runner", action="store_true")  # FitOptions.between_graph=None: fit's default
    parser.add_argument("--momentum", type=float, default=0.0)
    return parser.parse_args(argv)


def _task_main(argv) -> None:
    """One task of a job (or, without TF_CONFIG, the one-process reference)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = _parse(argv)
    import keras

    import models
    from toolkit import CheckpointConfig, ValidationConfig, data, fit
    from toolkit.training import FitOptions

    digits = data.load("digits")
    train = data.ArrayData("digits", digits.features[:_EXAMPLES], digits.labels[:_EXAMPLES], 10)
    test = data.load("digits", split="test")
    task = os.environ.get("TFDIST_TASK_NAME", "local")
    restarted = int(os.environ.get("TFDIST_RESTART_COUNT", "0"))

    class CrashOnce(keras.callbacks.Callback):
        """Kills the chief abruptly at a step, on the job's first start only."""

        def __init__(self):
            super().__init__()
            self.epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if restarted == 0 and self.epoch * args.steps_per_epoch + batch + 1 >= args.crash_at_step:
                print(f"crashing at step {self.epoch * args.steps_per_epoch + batch + 1}", flush=True)
                os._exit(17)

    validation_fn = test.dataset_fn(_BATCH, shuffle=False, repeat=False, drop_remainder=False)
    if args.eager_validation:  # the same batches, but `.numpy()` only works eagerly: no worker can trace it
        array_validation = validation_fn

        def eager_validation(context):
            dataset = array_validation(context)
            return dataset.take(dataset.cardinality().numpy())

        validation_fn = eager_validation

    def model_fn():
        model = models.digits_mlp(seed=11, dropout=args.dropout)
        if args.schedule:
            optimizer = keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.2, 10, 0.5),
                                             momentum=args.momentum)
        else:
            optimizer = keras.optimizers.Adam(5e-3)
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=args.steps_per_execution)
        return model

    history = fit(model_fn, train.dataset_fn(_BATCH, shuffle=False), epochs=args.epochs,
                  steps_per_epoch=args.steps_per_epoch, validation_fn=validation_fn, model_dir=args.model_dir,
                  callbacks=[CrashOnce()] if args.crash_at_step else [], verbose=1,
                  options=FitOptions(between_graph=None if args.default_runner else args.between_graph,
                                     checkpoint=CheckpointConfig(every=args.checkpoint_every), export=False,
                                     validation=ValidationConfig(evaluator_timeout=120)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"role": history.role, "history": history.history, "epoch": history.epoch,
              "global_step": history.global_step}
    if history.model is not None:
        np.savez(out / f"{task}.npz", *history.model.get_weights())
        result["devices"] = sorted({w.value.device for w in history.model.weights})
    (out / f"{task}.json").write_text(json.dumps(result))


# ---------------------------------------------------------------------------- tests

def _weights(path):
    with np.load(path) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


def _launch(tmp_path, name, extra, **kwargs):
    from toolkit.launcher import launch

    cmd = ["python", __file__, "--model-dir", str(tmp_path / name / "model"), "--out", str(tmp_path / name / "out"),
           *extra]
    return launch(cmd, job_dir=tmp_path / name / "job", timeout=_TIMEOUT, echo=False, **kwargs)


def _log(result, task):
    return result.task(task).log_path.read_text(errors="replace")


def _assert_same_weights(got, want, atol):
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=atol)


@pytest.mark.cluster
def test_multi_worker_mirrored_equals_one_process_and_resumes_exactly(tmp_path, no_orphans):
    # Reference: one process, global batch of 64, same data order and initial weights.
    reference = subprocess.run([sys.executable, __file__, "--model-dir", str(tmp_path / "ref" / "model"),
                                "--out", str(tmp_path / "ref")], cwd=_REPO, capture_output=True, text=True,
                               timeout=_TIMEOUT, env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    assert reference.returncode == 0, reference.stderr[-3000:]
    one_process = _weights(tmp_path / "ref" / "local.npz")

    whole = _launch(tmp_path, "mwms", [], chief=1, workers=1)
    assert whole.ok, whole.message
    assert "strategy multi_worker_mirrored" in _log(whole, "chief-0")
    chief, worker = (_weights(tmp_path / "mwms" / "out" / f"{t}.npz") for t in ("chief-0", "worker-0"))
    _assert_same_weights(worker, chief, atol=0)  # replicas never diverge
    _assert_same_weights(chief, one_process, atol=2e-5)  # loss scaling and gradient reduction are right
    chief_json = json.loads((tmp_path / "mwms" / "out" / "chief-0.json").read_text())
    reference_json = json.loads((tmp_path / "ref" / "local.json").read_text())
    np.testing.assert_allclose(chief_json["history"]["loss"], reference_json["history"]["loss"], rtol=1e-4)
    assert chief_json["global_step"] == 30 and "val_accuracy" in chief_json["history"]
    assert sorted(os.listdir(tmp_path / "mwms" / "model")).count("checkpoint") == 1
    assert not any(name.startswith("tfdist-") for name in os.listdir(tmp_path / "mwms" / "model"))

    crashed = _launch(tmp_path, "restart", ["--crash-at-step", "20"], chief=1, workers=1, restartable=True,
                      max_restarts=1)
    assert crashed.ok, crashed.message
    assert crashed.cluster_restarts == 1
    chief_log = _log(crashed, "chief-0")
    assert "crashing at step 21" in chief_log  # chunks of 3 steps: 3, 6, ..., 15, 18, 21
    assert "at global step 18" in chief_log  # restored the checkpoint at 18 (every 6 steps)
    resumed = json.loads((tmp_path / "restart" / "out" / "chief-0.json").read_text())
    assert resumed["epoch"] == [1] and resumed["global_step"] == 30
    _assert_same_weights(_weights(tmp_path / "restart" / "out" / "chief-0.npz"), chief, atol=1e-6)


@pytest.mark.cluster
def test_parameter_server_with_one_worker_equals_one_process(tmp_path, no_orphans):
    local_env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    reference = subprocess.run([sys.executable, __file__, "--model-dir", str(tmp_path / "ref" / "model"),
                                "--out", str(tmp_path / "ref"), "--dropout", "0.2"], cwd=_REPO, capture_output=True,
                               text=True, timeout=_TIMEOUT, env=local_env)
    assert reference.returncode == 0, reference.stderr[-3000:]
    result = _launch(tmp_path, "ps1", ["--dropout", "0.2", "--eager-validation"], workers=1, ps=1)
    assert result.ok, result.message
    chief_log = _log(result, "chief-0")
    assert "one transfer per ps" in chief_log  # the packed path really ran
    assert "validation on the workers failed" in chief_log and "validating on the chief from now on" in chief_log
    assert chief_log.count("validation on the workers failed") == 1  # tried once, then the chief validates
    chief = json.loads((tmp_path / "ps1" / "out" / "chief-0.json").read_text())
    assert chief["role"] == "chief" and chief["global_step"] == 30
    assert {d.split("/device")[0] for d in chief["devices"]} == {"/job:ps/replica:0/task:0"}
    local = json.loads((tmp_path / "ref" / "local.json").read_text())
    np.testing.assert_allclose(chief["history"]["loss"], local["history"]["loss"], rtol=1e-4)
    for key in ("val_loss", "val_accuracy"):
        np.testing.assert_allclose(chief["history"][key], local["history"][key], rtol=1e-4)
    _assert_same_weights(_weights(tmp_path / "ps1" / "out" / "chief-0.npz"), _weights(tmp_path / "ref" / "local.npz"),
                         atol=2e-5)


@pytest.mark.cluster
def test_parameter_server_training_with_an_evaluator_sidecar(tmp_path, no_orphans):
    import tensorflow as tf

    result = _launch(tmp_path, "pss", ["--schedule", "--steps-per-epoch", "20", "--steps-per-execution", "5",
                                       "--checkpoint-every", "10"],
                     workers=2, ps=2, evaluator=1, grace_period=60)
    assert result.ok, result.message
    for task in result.tasks:  # servers left on the chief's goodbye, the evaluator on the final checkpoint
        assert (task.exit_code, task.stopped) == (0, False), (task.name, _log(result, task.name)[-2000:])
    chief = json.loads((tmp_path / "pss" / "out" / "chief-0.json").read_text())
    assert chief["role"] == "chief" and chief["global_step"] == 40
    assert chief["history"]["loss"][1] < chief["history"]["loss"][0]
    assert {d.split("/device")[0] for d in chief["devices"]} == {"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}
    model_dir = str(tmp_path / "pss" / "model")
    latest = tf.train.latest_checkpoint(model_dir)
    assert latest.endswith("ckpt-40")
    assert tf.train.load_variable(latest, "global_step/.ATTRIBUTES/VARIABLE_VALUE") == 40  # exact, not racy
    # four saves (steps 10-40) ran one traced write: the later ones still wrote the values of their moment
    assert _log(result, "chief-0").count("tracing the checkpoint write") == 1
    learning_rates = [v.simple_value or float(tf.make_ndarray(v.tensor))
                      for name in os.listdir(os.path.join(model_dir, "train"))
                      for event in tf.compat.v1.train.summary_iterator(os.path.join(model_dir, "train", name))
                      for v in event.summary.value if v.tag == "learning_rate" and event.step == 40]
    assert learning_rates and learning_rates[-1] == pytest.approx(0.2 * 0.5 ** 4, rel=1e-5)
    evaluator = json.loads((tmp_path / "pss" / "out" / "evaluator-0.json").read_text())
    assert evaluator["role"] == "evaluator" and evaluator["epoch"][-1] == 40
    assert evaluator["history"]["accuracy"][-1] > 0.5
    # the workers validated, a shard each, and together saw every example once: the chief's validation after
    # the last step equals the evaluator's one-process evaluation of the final checkpoint
    assert _log(result, "chief-0").count("validated on the workers: 2 shards") == 2
    assert "validation on the workers failed" not in _log(result, "chief-0")
    assert chief["history"]["val_accuracy"][-1] == evaluator["history"]["accuracy"][-1]
    assert chief["history"]["val_loss"][-1] == pytest.approx(evaluator["history"]["loss"][-1], rel=1e-5)
    assert os.listdir(os.path.join(model_dir, "eval"))



def _steps_done(log):
    """The steps a worker's between-graph loop reports having run."""
    lines = [line for line in log.splitlines() if "between-graph steps done:" in line]
    assert len(lines) == 1, lines
    return int(lines[0].rsplit(":", 1)[1].split()[0])


@pytest.mark.cluster
def test_between_graph_steps_with_one_worker_equal_one_process(tmp_path, no_orphans):
    local_env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    flags = ["--steps-per-execution", "1", "--between-graph"]
    reference = subprocess.run([sys.executable, __file__, "--model-dir", str(tmp_path / "ref" / "model"),
                                "--out", str(tmp_path / "ref"), *flags], cwd=_REPO, capture_output=True,
                               text=True, timeout=_TIMEOUT, env=local_env)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert "between_graph=True applies to parameter servers only" in reference.stderr
    result = _launch(tmp_path, "bg1", flags, workers=1, ps=1)
    assert result.ok, result.message
    for task in result.tasks:
        assert (task.exit_code, task.stopped) == (0, False), (task.name, _log(result, task.name)[-2000:])
    assert "between-graph steps: 1 workers take step tokens" in _log(result, "chief-0")
    assert _steps_done(_log(result, "worker-0")) == 30
    chief = json.loads((tmp_path / "bg1" / "out" / "chief-0.json").read_text())
    assert chief["role"] == "chief" and chief["global_step"] == 30
    local = json.loads((tmp_path / "ref" / "local.json").read_text())
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(chief["history"][key], local["history"][key], rtol=1e-4, err_msg=key)
    _assert_same_weights(_weights(tmp_path / "bg1" / "out" / "chief-0.npz"), _weights(tmp_path / "ref" / "local.npz"),
                         atol=2e-5)


@pytest.mark.cluster
def test_between_graph_steps_with_two_workers_and_two_ps_are_exact(tmp_path, no_orphans):
    import tensorflow as tf

    result = _launch(tmp_path, "bg2", ["--default-runner", "--steps-per-execution", "4", "--schedule",
                                       "--momentum", "0.9", "--dropout", "0.2", "--steps-per-epoch", "20",
                                       "--checkpoint-every", "10", "--epochs", "3"], workers=2, ps=2)
    assert result.ok, result.message
    for task in result.tasks:
        assert (task.exit_code, task.stopped) == (0, False), (task.name, _log(result, task.name)[-2000:])
    assert "up to 4 steps per token" in _log(result, "chief-0")  # the default chose between-graph steps
    # the workers raced for the tokens, and together ran exactly the steps the chief released
    done = [_steps_done(_log(result, f"worker-{i}")) for i in range(2)]
    assert sum(done) == 60 and min(done) > 0, done
    chief = json.loads((tmp_path / "bg2" / "out" / "chief-0.json").read_text())
    assert chief["global_step"] == 60 and chief["epoch"] == [0, 1, 2]
    assert {d.split("/device")[0] for d in chief["devices"]} == {"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}
    assert chief["history"]["loss"][-1] < chief["history"]["loss"][0]
    assert chief["history"]["val_accuracy"][-1] > 0.5
    assert _log(result, "chief-0").count("validated on the workers: 2 shards") == 3
    model_dir = str(tmp_path / "bg2" / "model")
    for step in (40, 50, 60):  # each checkpoint on its step: the chief waited for exactly its tokens
        path = os.path.join(model_dir, f"ckpt-{step}")
        assert tf.train.load_variable(path, "global_step/.ATTRIBUTES/VARIABLE_VALUE") == step
    # the update kept Keras' own optimizer state: its iteration count, and SGD's momentum slots
    final = os.path.join(model_dir, "ckpt-60")
    assert tf.train.load_variable(final, "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 60
    assert np.abs(tf.train.load_variable(final, "optimizer/_variables/1/.ATTRIBUTES/VARIABLE_VALUE")).max() > 0


if __name__ == "__main__":
    _task_main(sys.argv[1:])
