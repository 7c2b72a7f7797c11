"""Job state is private to its user, and what a job's record says stays true after its supervisor dies.

The second-user test runs a real local job as root and then tries to read its
store and logs as an unprivileged user created for the test (useradd); where
the tests do not run as root it is skipped.
"""
from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _polling import wait_until

from toolkit.cli import main
from toolkit.jobs import JobSpec, JobState, JobStore, api
from toolkit.jobs.engines.local import _supervised
from toolkit.jobs.engines.local._procs import start_ticks
from toolkit.jobs.errors import JobExistsError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
PROBE_USER = "tfdist-probe"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_and_store_are_private(tmp_path):
    home = tmp_path / "new" / "home"
    store = JobStore(home)
    store.create("j1", backend="local", spec={"trainingInput": {"args": ["--token=secret"]}})
    assert _mode(home) == 0o700 and _mode(home / "jobs.db") == 0o600
    with contextlib.closing(sqlite3.connect(home / "jobs.db")) as reader:  # the WAL exists while one is open
        reader.execute("SELECT COUNT(*) FROM jobs").fetchone()
        assert _mode(home / "jobs.db-wal") == _mode(home / "jobs.db-shm") == 0o600  # SQLite copies the mode
    store.job_dir("j1")
    assert _mode(home / "jobs") == 0o700


def test_an_existing_home_open_to_others_is_used_with_a_warning(tmp_path, caplog):
    home = tmp_path / "shared-home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="toolkit.jobs.storage.store"):
        JobStore(home)
    assert _mode(home) == 0o755  # the user's directory is not changed behind their back
    assert f"the tfdist home {home} is readable by other users (mode 0755)" in caplog.text
    assert f"chmod 700 {home}" in caplog.text


def test_a_dead_supervisors_tasks_get_a_final_state_and_the_reason(tmp_path, monkeypatch, no_orphans):
    monkeypatch.setattr(_supervised, "HEARTBEAT_INTERVAL", 0.01)
    supervisor = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    supervisor.wait(timeout=60)
    task = subprocess.Popen(["sleep", "120"], start_new_session=True, env={**os.environ, "TFDIST_JOB_NONCE": "n0nce"})
    store = JobStore(tmp_path)
    store.create("orphaned", backend="local", spec={}, details={"tasks": ["master-0", "worker-0"]})
    store.transition("orphaned", JobState.PREPARING)
    store.transition("orphaned", JobState.RUNNING)
    store.set_supervisor("orphaned", pid=supervisor.pid, start_ticks=start_ticks(supervisor.pid),
                         host=socket.gethostname(), nonce="n0nce")
    store.update_task("orphaned", "master-0", state="RUNNING", pid=task.pid, pid_start=start_ticks(task.pid))
    store.update_task("orphaned", "worker-0", state="EXITED")
    record = wait_until(lambda: (r := api.describe("orphaned", home=tmp_path)).is_final and r, timeout=30,
                        what="the job of a dead supervisor to end")
    assert task.wait(timeout=30) == -15
    tasks = {t.name: t for t in record.tasks}
    assert record.state is JobState.FAILED and {t.state for t in tasks.values()} == {"STOPPED"}
    assert tasks["master-0"].reason.startswith(f"the job ended FAILED: supervisor died (pid {supervisor.pid})")
    assert tasks["worker-0"].reason.startswith("its process had ended but its exit code was lost; the job ended")
    assert record.to_dict()["tasks"][0]["reason"] == tasks["master-0"].reason


def test_a_finished_tasks_state_is_kept_when_the_job_ends(tmp_path):
    store = JobStore(tmp_path)
    store.create("done", backend="local", spec={})
    store.transition("done", JobState.PREPARING)
    store.transition("done", JobState.RUNNING)
    store.update_task("done", "master-0", state="SUCCEEDED", exit_code=0)
    record = store.transition("done", JobState.SUCCEEDED, message="every task finished")
    assert [(t.state, t.reason) for t in record.tasks] == [("SUCCEEDED", None)]


def test_trial_names_are_reserved_with_the_tuning_job(tmp_path):
    store = JobStore(tmp_path)
    store.create("coll-trial-2", backend="local", spec={})
    with pytest.raises(JobExistsError, match=r"'coll-trial-2' is a job already \(state QUEUED\)"):
        store.create("coll", backend="local", spec={}, details={"reservedNames": ["coll-trial-1", "coll-trial-2"]})
    assert "coll" not in store.names()  # refused whole: no record, and no reservation left behind
    store.create("coll-trial-1", backend="local", spec={})
    store.create("hp", backend="local", spec={}, details={"reservedNames": ["hp-trial-1", "hp-trial-2"]})
    with pytest.raises(JobExistsError, match="reserved for a trial of tuning job 'hp'"):
        store.create("hp-trial-1", backend="local", spec={})
    store.create("hp-trial-1", backend="local", spec={}, parent_job="hp")  # the study's own trial
    assert "reservedNames" not in store.get("hp").details  # kept in the store's table, not in every describe
    with pytest.raises(JobExistsError, match="'hp-trial-2' is reserved for a trial of tuning job 'hp'"):
        store.create("other", backend="local", spec={}, details={"reservedNames": ["hp-trial-2"]})


def test_a_tuning_job_whose_trial_name_is_taken_is_refused_at_submit(home, capsys):
    JobStore(home).create("coll-trial-3", backend="local", spec={})
    code = main(["jobs", "submit", "training", "coll", "--config", str(FIXTURES / "tune_probe.yaml"),
                 "--package-path", str(FIXTURES / "trainer")])
    err = capsys.readouterr().err
    assert code == 1 and "'coll-trial-3' is a job already" in err and "Pick another job name" in err
    assert JobStore(home).names() == ["coll-trial-3"]  # nothing was submitted


def _probe_user() -> pwd.struct_passwd:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a second, unprivileged user")
    try:
        return pwd.getpwnam(PROBE_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PROBE_USER],
                       check=True, capture_output=True, timeout=60)
        return pwd.getpwnam(PROBE_USER)


def _read_as(user: pwd.struct_passwd, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["cat", str(path)], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                          capture_output=True, text=True, timeout=30)


def test_another_user_cannot_read_the_store_or_the_logs(monkeypatch, no_orphans):
    user = _probe_user()
    root = Path(tempfile.mkdtemp(prefix="tfdist-shared-"))  # a directory every user can enter, like /home
    try:
        root.chmod(0o755)
        monkeypatch.setenv("TFDIST_HOME", str(root / "home"))
        monkeypatch.chdir(root)
        spec = JobSpec.from_dict({}, job_id="private", overrides={
            "pythonModule": "trainer.probe", "packagePath": str(FIXTURES / "trainer"), "jobDir": "out",
            "args": ["--marker", "secret-token-42"]})
        api.submit(spec)
        record = wait_until(lambda: (r := api.describe("private")).is_final and r, timeout=90, what="the job to end")
        assert record.state is JobState.SUCCEEDED, record.error
        logs = sorted((root / "home" / "jobs" / "private").rglob("*.log"))
        assert logs and any("secret-token-42" in p.read_text() for p in logs)
        control = root / "public.txt"
        control.write_text("anyone may read this")
        control.chmod(0o644)
        assert _read_as(user, control).stdout == "anyone may read this"  # the user can reach the directory
        for path in [root / "home" / "jobs.db", *logs]:
            denied = _read_as(user, path)
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, path
            assert "secret-token-42" not in denied.stdout
        assert {p.name: oct(_mode(p)) for p in logs if _mode(p) & 0o077} == {}  # private inside the home too
    finally:
        shutil.rmtree(root, ignore_errors=True)
