"""Distributed TensorFlow code in the published styles, run under ``tfdist launch`` as its authors wrote it.

- A TF1 between-graph script (Kubeflow's TFJob examples, TF1's tutorials): ``tf.train.Server``,
  ``replica_device_setter``, a ``Supervisor``, ps + 2 workers and no chief (worker 0 is the chief),
  in the launcher's own dialect and in TFJob's; every process, the ps included, exits 0 by itself.
  Its one change: ``import toolkit.compat.v1 as tf``.
- TensorFlow's "Parameter server training" tutorial, ``model.fit`` part: the strategy built by hand,
  servers that ``join()``, a ``tf.data.Dataset``, a model without ``keras.Input``,
  ``steps_per_execution`` and the tutorial's callbacks.

The scripts in ``_scripts/`` are written from those published examples, not from ours.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
SCRIPTS = Path(__file__).parent / "_scripts"
_TIMEOUT = 240


def _launch(args: list[str], timeout: float = _TIMEOUT) -> subprocess.CompletedProcess:
    """``tfdist launch --preload``: the tasks are forked from one TensorFlow import, their scripts unchanged."""
    cmd = [sys.executable, "-m", "toolkit", "launch", "--preload", "--timeout", str(timeout), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)


def _exits(stderr: str) -> dict[str, str]:
    """The launcher's summary line, ``tasks: ps-0=0, worker-0=0, ...``, as {task: exit code}."""
    line = re.search(r"^tasks: (.*?); logs in", stderr, re.MULTILINE)
    assert line, stderr[-3000:]
    return dict(item.split("=") for item in line.group(1).split(", "))


@pytest.mark.parametrize("dialect", ["tf", "tfjob"])
def test_tf1_between_graph_script_on_ps_and_two_workers_without_a_chief(tmp_path, quiet_tf, no_orphans, dialect):
    job_dir, train_dir = tmp_path / "job", tmp_path / "train"
    proc = _launch(["--chief", "0", "--workers", "2", "--ps", "1", "--dialect", dialect, "--grace-period", "10",
                    "--job-dir", str(job_dir), "--", "python", str(SCRIPTS / "tf1_dist_classifier.py"),
                    "--train_steps", "60", f"--train_dir={train_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "the chief (worker-0) exited with code 0" in proc.stderr
    # every process exits 0 by itself: the ps's own server.join() returned once worker 0 (the chief) saw the
    # workers done (a task the launcher had to stop would show -15)
    assert _exits(proc.stderr) == {"ps-0": "0", "worker-0": "0", "worker-1": "0"}
    assert "ps done" not in (job_dir / "logs" / "ps-0.log").read_text()  # join() ended the ps
    environment = "cloud" if dialect == "tfjob" else "none"
    for index in (0, 1):
        log = (job_dir / "logs" / f"worker-{index}.log").read_text()
        assert f"role worker:{index} environment {environment}" in log
        assert "variables on ['/job:ps/task:0/device:CPU:0']" in log  # replica_device_setter put them on the ps
        done = re.search(rf"worker {index} done: local steps (\d+), global step (\d+), accuracy ([\d.]+)", log)
        assert done and int(done.group(2)) >= 60, log[-2000:]
    assert float(done.group(3)) > 0.8
    # the chief (worker 0) saved the shared variables at the final global step
    checkpoint = (train_dir / "checkpoint").read_text()
    step = int(re.search(r'model_checkpoint_path: ".*model.ckpt-(\d+)"', checkpoint).group(1))
    assert step >= 60


def test_parameter_server_model_fit_tutorial_with_a_dataset_and_no_input_layer(tmp_path, quiet_tf, no_orphans):
    job_dir, out = tmp_path / "job", tmp_path / "out"
    out.mkdir()
    proc = _launch(["--workers", "2", "--ps", "1", "--job-dir", str(job_dir), "--", "python",
                    str(SCRIPTS / "ps_fit_tutorial.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    # the strategy built by hand as the tutorial does; the servers' join() returned when the chief ended
    assert _exits(proc.stderr) == {"ps-0": "0", "chief-0": "0", "worker-0": "0", "worker-1": "0"}
    result = json.loads((out / "result.json").read_text())
    assert result["epochs"] == [0, 1, 2, 3, 4] and len(result["history"]["loss"]) == 5
    assert result["history"]["loss"][-1] < result["history"]["loss"][0]
    assert result["model_history_is_fit_result"] and result["kernel_shape"] == [10, 10]
    assert "`steps_per_epoch` is None, but under ParameterServerStrategy" in result["refusal"]
    assert (out / "ckpt.keras").stat().st_size > 0 and any((out / "logs").rglob("events.out.tfevents.*"))
    assert not (out / "backup").exists()  # deleted after the run ended normally, as Keras does
