"""A server started by run_role() (no model directory) on the preemption signal: serves on, exits 143 at the grace.

Its notice to the chief and the chief's goodbye are exercised on a real cluster by
``tests/cluster/test_preemption_cluster.py`` (the Keras ``model.fit`` job's ps).
"""
from __future__ import annotations

import signal
import textwrap

from _children import preempted_and_stopped

from strategies._server_preemption import EXIT_PREEMPTED, arm, notice_kind

_CHILD = textwrap.dedent("""
    import logging, os, signal, time
    logging.basicConfig(level=logging.INFO)
    from strategies._server_preemption import arm
    # a chief that is not there (port 1 refuses): the notice cannot land, so only the grace ends the task
    assert arm({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "ps", 0, environ={"TFDIST_PREEMPTION_GRACE": "2"})
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
        assert not arm({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "ps", 0, environ={})
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
