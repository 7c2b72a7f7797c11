"""Published styles end cleanly: TensorFlow's hand-built PS custom loop, and a TF1 script's ``server.join()``.

Neither script calls tfdist to end the job: the PS tutorial's ps and workers
end in TensorFlow's own ``server.join()`` (armed by the launcher), the TF1
script's ps in ``toolkit.compat.v1``'s. Each run's signals go to a private
directory of its own, which must be 0700 and empty afterwards.
"""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strategies import EXIT_CHIEF_LOST
from tf_config import generate

SCRIPTS = Path(__file__).parent / "_scripts"
pytestmark = pytest.mark.cluster
_TIMEOUT = 240


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Each task forked from a process that imported TensorFlow once (conftest.py), not a fresh interpreter."""
    return forked_hand_cluster


@pytest.fixture
def signals(tmp_path, monkeypatch):
    path = tmp_path / "signals"
    monkeypatch.setenv("TFDIST_SIGNAL_DIR", str(path))
    yield path
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert sorted(os.listdir(path)) == []  # every hello and goodbye was taken


def test_a_hand_built_parameter_server_loop_ends_every_task_with_zero(tmp_path, quiet_tf, no_orphans, signals):
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "toolkit", "launch", "--workers", "2", "--ps", "2", "--job-dir", str(tmp_path / "job"),
           "--timeout", str(_TIMEOUT), "--preload", "--", "python", str(SCRIPTS / "pss_custom_loop_tutorial.py"),
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT + 60)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    # each task exited 0 by itself: one the launcher had to stop would show -15
    assert "tasks: ps-0=0, ps-1=0, chief-0=0, worker-0=0, worker-1=0;" in proc.stderr, proc.stderr[-3000:]
    assert json.loads(out.read_text())["epochs"] == 2
    assert re.search(r"^\[chief-0\] Finished epoch 1, loss is ", proc.stdout, re.MULTILINE)


def _tf1_cluster(hand_cluster, tmp_path, *, steps: int) -> dict:
    """ps-0 and worker-0 first; worker-1 once the chief (worker 0) has initialised the variables.

    A non-chief MonitoredTrainingSession that finds the variables uninitialised
    polls again only after 30 s (TF1's SessionManager), which is not what is tested here.
    """
    configs = {str(cfg.task): cfg for cfg in generate(chief=0, workers=2, ps=1)}
    script = [str(SCRIPTS / "tf1_between_graph_join.py"), f"--train_steps={steps}"]
    for name in ("ps-0", "worker-0"):
        hand_cluster.start(name, script, configs[name].to_json())
    _wait_for(hand_cluster, "worker-0", "worker 0: session ready")
    hand_cluster.start("worker-1", script, configs["worker-1"].to_json())
    return configs


def _wait_for(hand_cluster, name: str, text: str) -> None:
    deadline = time.monotonic() + _TIMEOUT
    while text not in hand_cluster.log(name):
        assert time.monotonic() < deadline and hand_cluster.procs[name].poll() is None, hand_cluster.log(name)[-3000:]
        time.sleep(0.2)


def test_a_tf1_between_graph_job_without_a_chief_ends_with_every_process_at_zero(hand_cluster, quiet_tf, tmp_path,
                                                                                 no_orphans, signals):
    _tf1_cluster(hand_cluster, tmp_path, steps=300)
    ended = hand_cluster.wait(_TIMEOUT)
    names = ["ps-0", "worker-0", "worker-1"]
    logs = {name: hand_cluster.log(name) for name in names}
    assert {name: ended.get(name, (None,))[0] for name in names} == dict.fromkeys(names, 0), \
        "\n".join(f"--- {name}:\n{log[-2000:]}" for name, log in logs.items())
    # join() ended the ps (atexit handlers ran) instead of returning into the worker code after it
    assert "ps 0: atexit ran" in logs["ps-0"]
    assert "ps 0: join returned" not in logs["ps-0"] and "session ready" not in logs["ps-0"]
    done = re.findall(r"worker \d: done after \d+ local steps, global step (\d+)", "".join(logs.values()))
    steps = [int(step) for step in done]
    assert len(steps) == 2 and max(steps) >= 299
    # worker 0 waited for worker 1 before it ended the ps
    assert ended["ps-0"][1] >= ended["worker-1"][1] - 0.5


def test_a_ps_whose_workers_all_died_exits_within_chief_lost_after(hand_cluster, quiet_tf, tmp_path, no_orphans,
                                                                   monkeypatch, signals):
    monkeypatch.setenv("TFDIST_CHIEF_LOST_AFTER", "3")
    _tf1_cluster(hand_cluster, tmp_path, steps=10**9)
    _wait_for(hand_cluster, "worker-1", "worker 1: session ready")
    # the ps has seen its chief (worker 0) up: one it never saw waits chief_start_timeout instead, by design
    _wait_for(hand_cluster, "ps-0", "is up (")
    for name in ("worker-0", "worker-1"):
        os.killpg(hand_cluster.procs[name].pid, signal.SIGKILL)
    killed = time.monotonic()
    ended = hand_cluster.wait(_TIMEOUT)
    assert ended.get("ps-0", (None,))[0] == EXIT_CHIEF_LOST, hand_cluster.log("ps-0")[-3000:]
    assert ended["ps-0"][1] - killed < 3 + 15
    assert "ps 0: join returned" not in hand_cluster.log("ps-0")
