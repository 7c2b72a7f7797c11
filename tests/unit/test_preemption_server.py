"""A preempted server on the signal: tells its chief through the cluster, serves on, exits 143 on its goodbye.

Every server reacts so, whoever started it (``toolkit.fit``, ``run_role()`` in
a Keras script, the Estimator's ps, a TF1 ps). Whole jobs are exercised on a
real cluster by ``tests/cluster/test_preemption_cluster.py`` and
``tests/cluster/test_preemption_estimator.py``.
"""
from __future__ import annotations

import signal
import textwrap

from _children import preempted_and_stopped

from strategies import ServeOptions
from strategies._server_preemption import EXIT_PREEMPTED, arm, notice_kind

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
    from toolkit.launcher._supervisor import STOP_MARKER

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

