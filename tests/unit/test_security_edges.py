"""Issue 41's last edges: a parent another user owns, a full disk under the store, rotated logs, the port race,
the Ray and Slurm launchers' signal directory and port check, and cancel of a job recorded before nonces.

As in ``test_security_shared``, the other user is ``nobody`` (root only, with ``chown``; skipped elsewhere),
and what is asserted is the artifact: the error naming the path and the fix, the job's recorded end, the log
files on disk, the process still alive or gone.
"""
from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys

import pytest

from toolkit._owned import ENV_SAFE_DIRECTORIES
from toolkit.launcher import LaunchError, launch


def _nobody() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("needs root: a second local user's files are made with chown")
    return pwd.getpwnam("nobody")


# ---- a parent directory another user owns (git's "dubious ownership") ----------------------------------------
def test_a_job_dir_whose_parent_another_user_owns_is_refused_unless_named_safe(tmp_path, monkeypatch, no_orphans):
    user = _nobody()
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, user.pw_uid, user.pw_gid)  # nobody's, and nobody else may write it: still theirs to swap
    job_dir = theirs / "run1"
    monkeypatch.delenv(ENV_SAFE_DIRECTORIES, raising=False)
    with pytest.raises(LaunchError) as info:
        launch(["python", "-c", "pass"], job_dir=job_dir, echo=False, isolate=False)
    message = str(info.value)
    assert f"its parent {theirs} belongs to nobody (uid {user.pw_uid}), mode 0755, not to you" in message
    assert f"export {ENV_SAFE_DIRECTORIES}={theirs}" in message and "\n" not in message
    assert not job_dir.exists()  # refused before anything was created in it
    monkeypatch.setenv(ENV_SAFE_DIRECTORIES, f"/nowhere{os.pathsep}{theirs}")  # the fix the message names
    assert launch(["python", "-c", "pass"], job_dir=job_dir, echo=False, isolate=False).exit_code == 0


def test_root_and_sticky_parents_are_accepted(tmp_path, no_orphans):
    sticky = tmp_path / "tmp-like"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: everyone may write, the sticky bit keeps them off others' entries
    for job_dir in (tmp_path / "mine", sticky / "run"):
        assert launch(["python", "-c", "pass"], job_dir=job_dir, echo=False, isolate=False).exit_code == 0


# ---- cancel of a job recorded before nonces ----------------------------------------------------------------
def test_cancel_stops_a_job_recorded_without_a_nonce_on_uid_start_time_and_command_line(tmp_path, monkeypatch,
                                                                                         no_orphans):
    from toolkit.jobs import JobState, JobStore, _supervised, api
    from toolkit.jobs._procs import start_ticks

    monkeypatch.setattr(_supervised, "HEARTBEAT_INTERVAL", 0.01)
    store = JobStore(tmp_path)
    sleeper = "import sys, time; time.sleep(60)"
    # as the old supervisor and task were started: their command lines carry the job's and the module's names
    supervisor = subprocess.Popen([sys.executable, "-c", sleeper, "-m", "toolkit.jobs.supervisor", "old",
                                   "--home", str(store.home)], start_new_session=True)
    task = subprocess.Popen([sys.executable, "-c", sleeper, "-m", "trainer.task"], start_new_session=True)
    decoy = subprocess.Popen([sys.executable, "-c", sleeper, "-m", "other.module"], start_new_session=True)
    try:
        store.create("old", backend="local", spec={}, details={"tasks": ["master-0", "worker-0"],
                                                               "plan": {"module": "trainer.task"}})
        store.transition("old", JobState.PREPARING)
        store.transition("old", JobState.RUNNING)
        store.set_supervisor("old", pid=supervisor.pid, start_ticks=start_ticks(supervisor.pid),
                             host=socket.gethostname())  # no nonce: recorded before there was one
        for name, proc in (("master-0", task), ("worker-0", decoy)):
            store.update_task("old", name, state="RUNNING", pid=proc.pid, pid_start=start_ticks(proc.pid))
        assert store.supervisor("old").nonce is None
        record = api.cancel("old", home=tmp_path, timeout=20)
        assert record.state is JobState.CANCELLED
        assert supervisor.wait(timeout=10) == -signal.SIGTERM and task.wait(timeout=10) == -signal.SIGTERM
        assert decoy.poll() is None  # same user, but its command line is not the job's: left alone
    finally:
        for proc in (supervisor, task, decoy):
            proc.kill()
            proc.wait(timeout=30)
