"""Preemption in a TF1 script of ``import toolkit.compat.v1 as tf``: its ps and its MonitoredTrainingSession.

The ps's notice travelling through a real cluster to mnist_replica.py's worker 0
is exercised by ``tests/cluster/test_mnist_replica.py``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

import toolkit.compat.v1 as v1
from strategies._cluster import tf2_cluster
from strategies._server_preemption import notice_kind
from strategies._signals import ensure_private_dir, signal_path
from tf_config.ports import pick_port
from toolkit.compat import _preemption
from toolkit.training.preemption import EXIT_PREEMPTED, TrainingPreempted, watcher


@pytest.fixture
def clean_watcher():
    """Restores SIGTERM's handler and the watcher afterwards (and keeps its watchdog from firing)."""
    previous, task = signal.getsignal(signal.SIGTERM), watcher().task
    yield watcher()
    watcher().task = task
    watcher().done.set()
    watcher().reset()
    watcher().role, watcher().installed = "train", False
    signal.signal(signal.SIGTERM, previous)


def _step_until_stopped(session, train, *, at: int, act) -> int:
    """Steps until the session stops, calling ``act()`` once the step reaches ``at``; returns the runs made."""
    runs = 0
    while not session.should_stop():
        step = session.run(train)
        runs += 1
        if step == at:
            act()
        time.sleep(0.11)  # longer than the chief's look for notices (every 0.1 s): it sees one at the next step
        assert runs < 100, "the session never stopped"
    return runs


def test_a_ps_notice_through_the_cluster_stops_the_chief_checkpointed_at_the_step_reached(tmp_path, clean_watcher,
                                                                                          monkeypatch, caplog):
    monkeypatch.setenv("TFDIST_SIGNAL_DIR", str(tmp_path / "signals"))
    monkeypatch.setenv("TFDIST_GOODBYE_TIMEOUT", "2")
    # worker 0 is TF1's chief; the ps address is closed, so the goodbye finds it gone
    cluster = {"ps": [f"127.0.0.1:{pick_port()}"], "worker": [f"127.0.0.1:{pick_port()}"]}
    monkeypatch.setattr(_preemption, "_SERVER", {"cluster": cluster, "job": "worker", "index": 0})
    ckpt = tmp_path / "ckpt"
    notice = signal_path(tf2_cluster(cluster), "worker", 0, notice_kind("ps", 0))

    def ps_preempted() -> None:  # what the ps's handler writes into the chief's process
        ensure_private_dir()
        with open(notice, "w") as out:
            out.write(f"{time.time():.3f}")

    with tf.Graph().as_default():
        train = v1.assign_add(v1.train.get_or_create_global_step(), 1)
        with pytest.raises(TrainingPreempted) as raised, v1.train.MonitoredTrainingSession(
                checkpoint_dir=str(ckpt), save_checkpoint_steps=1000, log_step_count_steps=None) as session:
            runs = _step_until_stopped(session, train, at=7, act=ps_preempted)
    assert runs == 8 and raised.value.code == EXIT_PREEMPTED == 143 and raised.value.step == 8
    assert tf.train.latest_checkpoint(str(ckpt)) == f"{ckpt}/model.ckpt-8"  # saved as the session closed
    assert not os.path.exists(notice)  # taken
    assert "worker-0: stopping at global step 8, ps-0 was preempted" in caplog.text
    assert "preempted (ps-0 preempted): worker-0 stopped after the step in flight" in caplog.text


def test_the_signal_to_a_task_of_a_script_without_a_server_checkpoints_at_the_step_and_close_raises(
        tmp_path, clean_watcher, monkeypatch, caplog):
    monkeypatch.setattr(_preemption, "_SERVER", {})
    ckpt = tmp_path / "ckpt"
    with tf.Graph().as_default():
        train = v1.assign_add(v1.train.get_or_create_global_step(), 1)
        session = v1.train.MonitoredTrainingSession(checkpoint_dir=str(ckpt), save_checkpoint_steps=1000,
                                                    log_step_count_steps=None)
        runs = _step_until_stopped(session, train, at=5, act=lambda: os.kill(os.getpid(), signal.SIGTERM))
        with pytest.raises(TrainingPreempted) as raised:
            session.close()
    assert runs == 6 and raised.value.code == 143 and raised.value.step == 6
    assert tf.train.latest_checkpoint(str(ckpt)) == f"{ckpt}/model.ckpt-6"
    assert "stopping at global step 6, the step in flight when SIGTERM came" in caplog.text


def test_a_session_that_is_not_preempted_ends_as_tf1_s(tmp_path, clean_watcher, monkeypatch):
    monkeypatch.setattr(_preemption, "_SERVER", {})
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        train = v1.assign_add(step, 1)
        with v1.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), log_step_count_steps=None,
                                               hooks=[v1.train.StopAtStepHook(last_step=3)]) as session:
            while not session.should_stop():
                session.run(train)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("-3")
    assert v1.train.MonitoredTrainingSession.__name__ == "MonitoredTrainingSession"


_PS = textwrap.dedent("""
    import logging, os, signal
    logging.basicConfig(level=logging.INFO)
    import toolkit.compat.v1 as tf
    from tf_config.ports import pick_port
    cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{pick_port()}"], "worker": [f"127.0.0.1:{pick_port()}"]})
    server = tf.train.Server(cluster, job_name="ps", task_index=0)
    assert type(server).__name__ == "Server" and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)
    print("serving on", flush=True)
    server.join()
""")


def test_a_tf1_ps_that_gets_the_signal_tells_the_chief_and_serves_on_until_the_grace_then_exits_143(tmp_path):
    """No chief here (its port is closed): the notice cannot land and no goodbye comes, so the grace ends it."""
    env = {**os.environ, "TFDIST_PREEMPTION_GRACE": "3", "TFDIST_CHIEF_START_TIMEOUT": "60",
           "TFDIST_SIGNAL_DIR": str(tmp_path / "signals"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", _PS], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr[-3000:]
    assert "serving on" in proc.stdout
    assert "SIGTERM: ps-0 was preempted; it tells the chief and serves until the chief has checkpointed" \
        in proc.stderr
    assert "no goodbye from the chief within 3 s of the signal; exiting with 143" in proc.stderr
