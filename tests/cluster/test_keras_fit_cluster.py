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

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

_REPO = Path(__file__).resolve().parents[2]
_EXAMPLES = _REPO / "examples"
_TIMEOUT = 300
_EPOCHS = 5


def _launch(tmp_path, script, **kwargs):
    from toolkit.launcher import launch

    cmd = ["python", str(_EXAMPLES / script), "--model-dir", str(tmp_path / "model"), "--epochs", str(_EPOCHS)]
    result = launch(cmd, job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False, **kwargs)
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
    assert accuracy > 0.9
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
