"""Keras 3's own ``model.fit`` under the multi-worker strategies, as users run the tutorials.

Both scripts in ``examples/`` are plain Keras (``keras.Sequential``, ``compile``,
``fit``) plus ``toolkit.enable_distributed_keras()``, started by the launcher:

1. MultiWorkerMirrored on 2 workers: every process exits 0, the chief alone
   writes the ModelCheckpoint, the saved model classifies the test digits
   (> 0.9), the AUC the script reports equals scikit-learn's on the saved
   model's predictions, and the weights equal Keras' own ``fit`` in one
   process on the same global batches (loss scaling and gradient reduction
   are right).
2. ParameterServer with 2 workers + 1 ps (+ the chief coordinating): the same
   checks on accuracy, AUC and the checkpoint, and every server exits 0.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

_REPO = Path(__file__).resolve().parents[2]
_EXAMPLES = _REPO / "examples"
_TIMEOUT = 300
_EPOCHS = 5
_PRELOAD = ("tensorflow", "keras")  # each task forked from one import, not a fresh interpreter


def _launch(tmp_path, script, **kwargs):
    from toolkit.launcher import launch

    cmd = ["python", str(_EXAMPLES / script), "--model-dir", str(tmp_path / "model"), "--epochs", str(_EPOCHS)]
    result = launch(cmd, job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False, preload=_PRELOAD, **kwargs)
    assert result.ok, result.message
    for task in result.tasks:
        assert (task.exit_code, task.stopped) == (0, False), (task.name, _log(result, task.name)[-2000:])
    return result


def _log(result, task):
    return result.task(task).log_path.read_text(errors="replace")


def _reported(log):
    """The script's own last line: ``test loss L accuracy A auc U``."""
    match = re.search(r"test loss ([\d.]+) accuracy ([\d.]+) auc ([\d.]+)", log)
    assert match, log[-2000:]
    return [float(v) for v in match.groups()]


def _example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", _EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_saved_model(model_dir, reported, test):
    import keras
    from sklearn.metrics import roc_auc_score

    model = keras.saving.load_model(model_dir / "digits.keras")
    x_test, y_test = test
    predictions = model.predict(x_test, verbose=0)
    accuracy = float(np.mean(predictions.argmax(-1) == y_test.argmax(-1)))
    # asynchronous updates: 0.95-0.97 on an idle machine, 0.90 once under the full suite's load; chance is 0.1
    assert accuracy > 0.85
    _, reported_accuracy, reported_auc = reported
    assert reported_accuracy == pytest.approx(accuracy, abs=1e-4)
    # Keras' AUC uses 200 thresholds; scikit-learn's is exact: they agree to about 1e-3.
    assert reported_auc == pytest.approx(roc_auc_score(y_test.ravel(), predictions.ravel()), abs=2e-3)
    return model


@pytest.mark.cluster
def test_keras_fit_multi_worker_mirrored_example(tmp_path, quiet_tf, no_orphans):
    result = _launch(tmp_path, "keras_multi_worker.py", workers=2)
    chief, worker = _log(result, "worker-0"), _log(result, "worker-1")
    assert f"Epoch {_EPOCHS}: saving model to" in chief and "saving model" not in worker
    assert "val_auc" in chief
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["digits.keras"]
    reported = _reported(chief)
    assert _reported(worker) == reported  # every worker evaluates the same weights

    example = _example("keras_multi_worker")
    import keras

    import toolkit

    toolkit.disable_distributed_keras()  # the reference is Keras' own fit, in one process
    keras.utils.set_random_seed(1)
    reference = example.build_and_compile_model()
    reference.fit(example.digits_dataset(64), epochs=_EPOCHS, steps_per_epoch=1500 // 64, verbose=0)
    model = _check_saved_model(tmp_path / "model", reported, example.digits("test"))
    for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, atol=2e-4)


@pytest.mark.cluster
def test_keras_fit_parameter_server_example(tmp_path, quiet_tf, no_orphans):
    result = _launch(tmp_path, "keras_parameter_server.py", workers=2, ps=1, grace_period=60)
    assert {task.name for task in result.tasks} == {"chief-0", "worker-0", "worker-1", "ps-0"}
    chief = _log(result, "chief-0")
    assert f"Epoch {_EPOCHS}: saving model to" in chief and "val_auc" in chief
    assert all("saving model" not in _log(result, t) for t in ("worker-0", "worker-1", "ps-0"))
    example = _example("keras_parameter_server")
    import toolkit

    toolkit.disable_distributed_keras()
    _check_saved_model(tmp_path / "model", _reported(chief), example.digits("test"))


_RESUME_SCRIPT = Path(__file__).resolve().parent / "_scripts" / "keras_resume.py"
_STEPS = 16  # steps per epoch in keras_resume.py


class _Job:
    """``launch`` in a thread, with every task's pid as the launcher reports it."""

    def __init__(self, tmp_path, **shape):
        import threading

        from toolkit.launcher import launch

        self.pids: dict[str, int] = {}
        self.job_dir = tmp_path / "job"
        self.backup_dir = tmp_path / "backup"
        self.result = None
        cmd = ["python", str(_RESUME_SCRIPT), "--backup-dir", str(self.backup_dir), "--steps", str(_STEPS),
               "--pause-task", "chief-0" if shape.get("ps") else "worker-1"]

        def run():
            self.result = launch(cmd, job_dir=self.job_dir, timeout=_TIMEOUT, echo=False, max_restarts=1,
                                 restartable=True, grace_period=60, on_task=self._seen, preload=_PRELOAD,
                                 **shape)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def _seen(self, event):
        if event.kind == "started":
            self.pids[event.name] = event.pid

    def stop(self):
        """Kills every task until the launcher gives up (a failed test must not leave the job running)."""
        while self.thread.is_alive():
            for pid in list(self.pids.values()):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            self.thread.join(0.5)

    def log(self, task):
        path = self.job_dir / "logs" / f"{task}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.mark.cluster
# Under parameter servers the chief is killed; its backups are written by one traced function
# (``TracedWriteCheckpoint``), so this also checks that a later traced write restores exactly.
@pytest.mark.parametrize("shape", [{"workers": 2}, {"workers": 2, "ps": 1}], ids=["mwms", "ps"])
def test_keras_backup_and_restore_resumes_after_a_kill_and_early_stopping_ends_every_task(
        tmp_path, quiet_tf, no_orphans, shape):
    """SIGKILL a task mid-epoch 3 (after the epoch-2 backup), let the launcher restart the whole job.

    The new run must restore the backup and go on from epoch 3 (global step 32), not from 0;
    EarlyStopping (patience 2, never an improvement after a run's first epoch) then stops it
    after epoch 5, on every task at once; every task exits 0; the backup directory only ever
    held the chief's checkpoint (no shared-file race) and is gone after the normal end.
    """
    from _polling import wait_until

    job = _Job(tmp_path, **shape)
    try:
        _kill_and_check_the_resumed_run(job, shape, wait_until)
    finally:
        job.stop()


def _kill_and_check_the_resumed_run(job, shape, wait_until):
    victim = "chief-0" if shape.get("ps") else "worker-1"
    trainers = ["chief-0"] if shape.get("ps") else ["worker-0", "worker-1"]
    wait_until(lambda: "pausing in epoch 2" in job.log(victim) or not job.thread.is_alive(), timeout=240,
               what=f"{victim} to reach epoch 3")
    assert job.thread.is_alive(), f"the job ended before epoch 3: {job.result and job.result.message}"
    # beside the checkpoints: the preemption notices and the longest save's time (docs/preemption.md)
    backup = sorted(p.name for p in job.backup_dir.iterdir() if p.name != "preemption")
    # one writer's checkpoint of the epoch-2 end (TensorFlow's files, not Keras' shared latest.weights.h5)
    assert {name.split(".")[0] for name in backup} == {"checkpoint", f"ckpt-{2 * _STEPS}"}, backup
    assert f"ckpt-{2 * _STEPS}.index" in backup, backup
    pid = int(re.search(r"pausing in epoch 2 at batch \d+ pid (\d+)", job.log(victim)).group(1))
    os.kill(pid, signal.SIGKILL)  # the training process itself, mid-epoch
    job.thread.join(_TIMEOUT)
    result = job.result
    assert result is not None and result.ok, result and result.message
    assert result.cluster_restarts == 1
    for task in result.tasks:
        assert (task.exit_code, task.stopped, task.restarts) == (0, False, 1), (task.name,
                                                                               _log(result, task.name)[-3000:])

    weights = []
    for name in trainers:
        log = _log(result, name)
        first, second = log.split("restarted (start #2)")
        assert "restored the backup" not in first  # the first run started from scratch ...
        assert f"epoch 2/20 step {2 * _STEPS}:" in first and "epoch 3/20 step" not in first
        assert re.search(rf"restored the backup \S+ckpt-{2 * _STEPS} at global step {2 * _STEPS}", second), second
        assert "epoch 1/20" not in second and "epoch 2/20" not in second  # ... the second one resumed at epoch 3
        assert f"epoch 5/20 step {5 * _STEPS}:" in second and "epoch 6/20" not in second
        assert "Epoch 5: early stopping" in second
        history = json.loads(re.search(r"^history (.*)$", second, re.M).group(1))
        assert history["epoch"] == [2, 3, 4] and len(history["loss"]) == 3, history
        first_losses = [float(v) for v in re.findall(r"epoch \d/20 step \d+: loss=([\d.]+)", first)]
        assert history["loss"][0] < first_losses[0]  # it trained on from the restored weights
        with np.load(result.job_dir / "tasks" / name / "weights.npz") as saved:
            weights.append([saved[key] for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))])
    for got, want in zip(weights[-1], weights[0], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)  # every worker stopped at the same step
    assert not job.backup_dir.exists()  # deleted after the run that ended normally, as Keras does
