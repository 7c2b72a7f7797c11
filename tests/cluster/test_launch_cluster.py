"""The local launcher with real TensorFlow clusters on 127.0.0.1.

The training scripts in ``_scripts/`` are tiny custom loops (Keras ``fit`` does
not work under the multi-worker strategies, see FINDINGS): parameter-server
training through ``ClusterCoordinator.schedule``, and multi-worker-mirrored
training through ``strategy.run``.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolkit.launcher import launch

pytestmark = pytest.mark.cluster
SCRIPTS = Path(__file__).parent / "_scripts"
_TIMEOUT = 300
_PRELOAD = ("tensorflow", "keras")  # tasks forked from one TensorFlow import; the fresh path is tested above too


def _result(job_dir: Path, task: str) -> dict:
    return json.loads((job_dir / "tasks" / task / "result.json").read_text())


def _weights(job_dir: Path, task: str) -> list[np.ndarray]:
    with np.load(job_dir / "tasks" / task / "weights.npz") as data:
        return [data[key] for key in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


def test_killed_parameter_server_worker_is_restarted_and_the_job_completes(tmp_path, quiet_tf, no_orphans):
    result = launch(["python", str(SCRIPTS / "pss_train.py"), "--steps", "80", "--kill-worker", "worker-1",
                     "--kill-at-step", "20"], workers=2, ps=1, max_restarts=1, settle_period=2,
                    job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False)
    chief_log = result.task("chief-0").log_path.read_text()
    assert result.exit_code == 0, result.message
    assert "killed worker-1" in chief_log and "worker-1 restarted as pid" in chief_log and "serves again" in chief_log
    assert result.task("worker-1").restarts == 1
    # the restarted worker rejoined the cluster: it got the chief's goodbye and exited 0 by itself
    assert {t.name: (t.exit_code, t.stopped) for t in result.tasks} == dict.fromkeys(
        ["ps-0", "chief-0", "worker-0", "worker-1"], (0, False))
    # the chief stopped the coordinator's threads, the recovering worker's too, before it said goodbye
    assert _result(result.job_dir, "chief-0") | {"loss_before": 0, "loss_after": 0} == {
        "steps": 80, "loss_before": 0, "loss_after": 0, "coordinator_threads": []}
    assert json.loads((result.job_dir / "tasks" / "worker-1" / "preloaded").read_text()) is False  # fresh


def test_cli_preloaded_parameter_server_job_every_task_exits_zero_and_a_killed_worker_is_forked_again(
        tmp_path, quiet_tf, no_orphans):
    """``tfdist launch --preload``: every task is forked from one TensorFlow import, and a killed worker too.

    The same run checks the CLI's console and logs, and that every task, the restarted worker too, exits 0
    by itself (``test_killed_parameter_server_worker_...`` checks the same restart with fresh interpreters).
    """
    job_dir = tmp_path / "job"
    cmd = [sys.executable, "-m", "toolkit", "launch", "--workers", "2", "--ps", "1", "--job-dir", str(job_dir),
           "--max-restarts", "1", "--preload", "--timeout", str(_TIMEOUT), "--", "python",
           str(SCRIPTS / "pss_train.py"), "--steps", "80", "--kill-worker", "worker-1", "--kill-at-step", "20"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT + 60)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    # every task exited 0 on its own: a task the launcher had to stop would show -15
    assert "tasks: ps-0=0, chief-0=0, worker-0=0, worker-1=0 (restarted 1x);" in proc.stderr
    chief_log = (job_dir / "logs" / "chief-0.log").read_text()
    assert "killed worker-1" in chief_log and "serves again" in chief_log
    result = _result(job_dir, "chief-0")
    assert result["steps"] == 80 and result["loss_after"] < result["loss_before"] / 10
    assert re.search(r"^\[chief-0\] trained 80 steps, loss ", proc.stdout, re.MULTILINE)
    for task in ("ps-0", "worker-0", "worker-1"):
        assert any(line.startswith(f"[{task}] ") for line in proc.stdout.splitlines())
        assert (job_dir / "logs" / f"{task}.log").stat().st_size > 0
    assert "trained 80 steps" in chief_log
    # every task, the restarted worker-1 too, found TensorFlow imported when its script started: it was forked
    for task in ("ps-0", "chief-0", "worker-0", "worker-1"):
        assert json.loads((job_dir / "tasks" / task / "preloaded").read_text()) is True, task
    killed = int(re.search(r"killed worker-1 \(pid (\d+)\)", chief_log).group(1))
    assert int((job_dir / "tasks" / "worker-1" / "pid").read_text()) != killed


def test_multi_worker_mirrored_workers_end_with_identical_weights(tmp_path, quiet_tf, no_orphans):
    result = launch(["python", str(SCRIPTS / "mwms_train.py"), "--steps", "30"], workers=2,
                    job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False, preload=_PRELOAD)
    assert result.exit_code == 0, result.message
    assert [(t.name, t.exit_code, t.stopped) for t in result.tasks] == [("worker-0", 0, False),
                                                                         ("worker-1", 0, False)]
    first, second = _weights(result.job_dir, "worker-0"), _weights(result.job_dir, "worker-1")
    assert len(first) == 4
    for a, b in zip(first, second, strict=False):
        np.testing.assert_array_equal(a, b)
    assert _result(result.job_dir, "worker-1")["steps"] == 30


def test_multi_worker_mirrored_death_restarts_the_cluster_from_its_checkpoint(tmp_path, quiet_tf, no_orphans):
    result = launch(["python", str(SCRIPTS / "mwms_train.py"), "--steps", "30", "--checkpoint-every", "5",
                     "--die-task", "worker-1", "--die-at-step", "12"], workers=2, max_restarts=1,
                    restartable=True, settle_period=2, job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False,
                    preload=_PRELOAD)
    assert result.exit_code == 0, result.message
    assert result.cluster_restarts == 1
    assert [(t.name, t.restarts, t.exit_code) for t in result.tasks] == [("worker-0", 1, 0), ("worker-1", 1, 0)]
    for task in ("worker-0", "worker-1"):
        assert _result(result.job_dir, task) | {"loss": None} == {"steps": 30, "resumed_from": 10, "loss": None}
    for a, b in zip(_weights(result.job_dir, "worker-0"), _weights(result.job_dir, "worker-1"), strict=False):
        np.testing.assert_array_equal(a, b)
    assert "restarted (start #2)" in result.task("worker-1").log_path.read_text()
