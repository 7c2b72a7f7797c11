"""A preempted server on the signal: tells its chief through the cluster, serves on, exits 143 on its goodbye.

Every server reacts so, whoever started it (``toolkit.fit``, ``run_role()`` in
a Keras script, the Estimator's ps, a TF1 ps). Whole jobs are exercised on a
real cluster by ``tests/cluster/test_preemption_cluster.py`` and
``tests/cluster/test_preemption_estimator.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from _children import preempted_and_stopped

from strategies import ServeOptions
from strategies._server_preemption import EXIT_PREEMPTED, arm, notice_kind
from tf_config.ports import pick_port

_CHILD = textwrap.dedent("""
    import logging, os, signal, time
    logging.basicConfig(level=logging.INFO)
    from strategies import ServeOptions
    from strategies._server_preemption import arm
    # a chief that is not there (port 1 refuses): the notice cannot land, so only the grace ends the task
    assert arm({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "ps", 0, ServeOptions(preemption_grace=2))
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
""")


def test_a_preempted_server_serves_on_until_the_grace_and_the_launcher_s_sigterm_still_ends_it(tmp_path):
    procs, out = preempted_and_stopped(_CHILD, tmp_path)
    assert procs["stopped"].returncode == -signal.SIGTERM and "preempted" not in out["stopped"]
    assert procs["preempted"].returncode == EXIT_PREEMPTED == 143, out["preempted"]
    assert "SIGTERM: ps-0 was preempted; it tells the chief and serves until the chief has checkpointed" \
        in out["preempted"]
    assert "already preempting" in out["preempted"]  # the second signal changes nothing
    assert "no goodbye from the chief within 2 s of the signal; exiting with 143" in out["preempted"]


def test_a_handler_installed_before_is_left_alone():
    def mine(signum, frame):
        return None

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        assert not arm({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "ps", 0, ServeOptions())
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert notice_kind("worker", 1) == "preempted-worker-1"


def test_the_launcher_s_stop_marker_is_the_one_every_preemption_handler_looks_for(tmp_path, monkeypatch):
    """strategies cannot import the launcher, so it names the task directory and stop marker itself."""
    from strategies._server_preemption import stopped_by_launcher
    from toolkit.launcher._spec import ENV_TASK_DIR
    from toolkit.launcher.local._supervisor import STOP_MARKER

    monkeypatch.setenv(ENV_TASK_DIR, str(tmp_path))
    assert not stopped_by_launcher()
    (tmp_path / STOP_MARKER).write_text("stop")
    assert stopped_by_launcher()
    monkeypatch.setenv(ENV_TASK_DIR, "")
    assert not stopped_by_launcher()


def test_the_signal_a_server_waits_for_is_the_serve_options_one():
    previous = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)
    try:
        assert arm({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "ps", 0,
                   ServeOptions.from_env({"TFDIST_PREEMPTION_SIGNAL": "usr1"}))
        assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL  # the handler waits for SIGUSR1
        assert signal.getsignal(signal.SIGTERM) is previous[1]  # and leaves SIGTERM alone
    finally:
        signal.signal(signal.SIGUSR1, previous[0])


_CHIEF = textwrap.dedent("""
    import json, logging, sys, time
    logging.basicConfig(level=logging.INFO)
    import tensorflow as tf
    from strategies._server_preemption import notice_paths
    from strategies._shutdown import say_goodbye
    from strategies._signals import ensure_private_dir, take_signal
    cluster = json.loads(sys.argv[1])
    ensure_private_dir()
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="chief", task_index=0)
    path, deadline = notice_paths(cluster)["ps-0"], time.monotonic() + 150
    while take_signal(path) is None:  # the preempted ps's notice, written into this process through the cluster
        assert time.monotonic() < deadline, "no notice from ps-0"
        time.sleep(0.1)
    print("chief: took the notice of ps-0", flush=True)
    print("chief: goodbye with 143 reached", say_goodbye(cluster, [("ps", 0)], 143), flush=True)
""")

_FIT_PS = textwrap.dedent("""
    import json, logging, sys
    logging.basicConfig(level=logging.INFO)
    from strategies import run_role
    from tf_config import TFConfig
    from toolkit.training.preemption import install
    cfg = TFConfig.from_dict({"cluster": json.loads(sys.argv[1]), "task": {"type": "ps", "index": 0}})
    install(role="server", task="ps-0")  # as toolkit.fit does in its servers, then serves
    run_role(cfg)
""")


def _wait_for(path, text: str, proc: subprocess.Popen, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, path.read_text()[-3000:]
        time.sleep(0.1)


def test_a_fit_server_with_a_model_dir_tells_its_chief_through_the_cluster_and_exits_143_on_its_goodbye(tmp_path):
    """A real chief and ps: the ps's notice lands in the chief's process, the chief's goodbye ends the ps."""
    # (the worker parameter servers need is never started: the ps and its chief are the test)
    cluster = {name: [f"127.0.0.1:{pick_port()}"] for name in ("chief", "ps", "worker")}
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    env = {**os.environ, "TFDIST_SIGNAL_DIR": str(tmp_path / "signals"), "TFDIST_PREEMPTION_GRACE": "20",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TFDIST_TASK_DIR", None)
    logs = {name: tmp_path / f"{name}.log" for name in ("chief", "ps")}
    procs = {name: subprocess.Popen([sys.executable, "-c", child, json.dumps(cluster), str(model_dir)], env=env,
                                    stdout=logs[name].open("w"), stderr=subprocess.STDOUT)
             for name, child in (("chief", _CHIEF), ("ps", _FIT_PS))}
    try:
        _wait_for(logs["ps"], "is up (its port answers)", procs["ps"])  # serving, and its chief is up
        signalled = time.monotonic()
        procs["ps"].send_signal(signal.SIGTERM)
        codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
        took = time.monotonic() - signalled
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = {name: path.read_text() for name, path in logs.items()}
    assert codes == {"chief": 0, "ps": EXIT_PREEMPTED}, out
    assert "SIGTERM: ps-0 was preempted; it tells the chief and serves until the chief has checkpointed" in out["ps"]
    assert "chief: took the notice of ps-0" in out["chief"]
    assert "chief: goodbye with 143 reached ['ps-0']" in out["chief"]
    assert "ps-0: the chief said goodbye; exiting with 143" in out["ps"], out["ps"][-3000:]
    assert "no goodbye from the chief" not in out["ps"] and took < 20  # the goodbye, not the grace's watchdog
    assert list(model_dir.iterdir()) == []  # nothing travels through the model directory
