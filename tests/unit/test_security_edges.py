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
import time
from pathlib import Path

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
    from toolkit.jobs.engines.local._procs import start_ticks

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


# ---- a full disk under the store as the job ends -----------------------------------------------------------
_WAITER = """
import sys, time
from pathlib import Path
flag = Path(sys.argv[1])
while not flag.exists():
    time.sleep(0.05)
print("done waiting")
"""


def test_an_end_the_full_store_refused_is_kept_shown_and_recorded_once_there_is_room(tmp_path, monkeypatch,
                                                                                       no_orphans):
    import resource

    from _polling import wait_until

    from toolkit.jobs import JobSpec, JobState, JobStore, api
    from toolkit.jobs.storage._end_record import END_FILE, RESERVED

    package = tmp_path / "pkg" / "waiter"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(_WAITER)
    home, flag = tmp_path / "home", tmp_path / "go"
    monkeypatch.setenv("TFDIST_HOME", str(home))
    spec = JobSpec.from_dict({}, job_id="full", overrides={"pythonModule": "waiter.task",
                                                           "packagePath": str(package), "args": [str(flag)]})
    api.submit(spec)
    store = JobStore(home)
    wait_until(lambda: any(t.pid for t in store.get("full").tasks), timeout=60, what="the task to start")
    supervisor = store.supervisor("full").pid
    # The store's disk fills: the supervisor can write no byte past RESERVED in any file (RLIMIT_FSIZE; Python
    # ignores SIGXFSZ, so a write fails with EFBIG as one on a full disk fails with ENOSPC). Its WAL's first
    # frame already ends past that, so SQLite cannot commit; the end record reserved at its start fits.
    hard = resource.prlimit(supervisor, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(supervisor, resource.RLIMIT_FSIZE, (RESERVED, hard))  # the soft limit: it can be lifted
    try:
        flag.touch()
        record = wait_until(lambda: (r := api.describe("full")).is_final and r, timeout=60,
                            what="the job's end to be shown")
        assert store.get("full").state is JobState.RUNNING  # the store has not got it ...
        assert record.state is JobState.SUCCEEDED and record.exit_code == 0  # ... but every reader shows it
        assert any(f"kept in {END_FILE}: the job store could not be written" in w for w in record.warnings)
        assert os.path.exists(f"/proc/{supervisor}")  # alive and retrying: no reaper calls it dead
        assert b'"state": "SUCCEEDED"' in (home / "jobs" / "full" / END_FILE).read_bytes()
    finally:
        resource.prlimit(supervisor, resource.RLIMIT_FSIZE, (hard, hard))
    stored = wait_until(lambda: (r := store.get("full")).is_final and r, timeout=30,
                        what="the supervisor's retry to reach the store")
    assert stored.state is JobState.SUCCEEDED and stored.exit_code == 0
    assert (home / "jobs" / "full" / END_FILE).read_bytes().strip() == b""  # the store has it: the record is blank


def test_the_reaper_records_the_end_a_dead_supervisor_kept_not_supervisor_died(tmp_path, monkeypatch):
    from toolkit.jobs import JobState, JobStore, _supervised, api
    from toolkit.jobs.engines.local._procs import start_ticks
    from toolkit.jobs.storage._end_record import reserve, write_end

    monkeypatch.setattr(_supervised, "HEARTBEAT_INTERVAL", 0.01)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    store = JobStore(tmp_path)
    store.create("gone", backend="local", spec={}, details={"tasks": ["master-0"]})
    store.transition("gone", JobState.PREPARING)
    store.transition("gone", JobState.RUNNING)
    store.set_supervisor("gone", pid=dead.pid, start_ticks=start_ticks(dead.pid), host=socket.gethostname())
    record_dir = store.job_dir("gone")
    record_dir.mkdir()
    reserve(record_dir)
    assert write_end(record_dir, JobState.FAILED, why="database or disk is full", exit_code=3,
                     error="the chief (master-0) exited with code 3")
    time.sleep(0.1)  # its heartbeat goes stale (3 beats of 10 ms): the supervisor counts as dead
    record = api.describe("gone", home=tmp_path)
    assert record.state is JobState.FAILED and record.exit_code == 3
    assert record.error == "the chief (master-0) exited with code 3"  # how it ended, not "supervisor died"
    assert "the job store could not be written: database or disk is full" in record.history[-1].message
    assert store.get("gone").state is JobState.FAILED  # the store has it now


# ---- log rotation ----------------------------------------------------------------------------------------------
_NUMBERED = "import sys\nfor i in range(60):\n    print(f'line {i:03d} ' + 'x' * 90)\n"


def test_max_log_bytes_with_backups_rotates_and_keeps_the_newest_output(tmp_path, no_orphans):
    result = launch(["python", "-c", _NUMBERED], job_dir=tmp_path / "job", echo=False, isolate=False,
                    max_log_bytes=1000, log_backups=2)
    assert result.exit_code == 0
    logs = tmp_path / "job" / "logs"
    files = [logs / "worker-0.log.2", logs / "worker-0.log.1", logs / "worker-0.log"]  # oldest first
    assert all(f.stat().st_size <= 1000 for f in files) and not (logs / "worker-0.log.3").exists()
    kept = b"".join(f.read_bytes() for f in files).decode().splitlines()
    numbers = [int(line.split()[1]) for line in kept]
    assert numbers == list(range(60 - len(numbers), 60)) and len(numbers) >= 20  # the newest lines, in a row
    assert "rotated" in result.task("worker-0").log_problem and "earliest output is gone" in \
        result.task("worker-0").log_problem


def test_log_backups_need_max_log_bytes():
    with pytest.raises(LaunchError, match="`log_backups` is 2, but `max_log_bytes` is not set"):
        launch(["python", "-c", "pass"], log_backups=2, echo=False)


def test_stream_logs_and_the_ui_follow_a_rotated_log_without_losing_or_repeating_a_line(tmp_path):
    from toolkit.jobs.storage.logs import LogFollower
    from toolkit.launcher._rotate import RotatingLogSink
    from toolkit.ui._logs import read_chunk

    path = tmp_path / "worker-0.log"
    sink = RotatingLogSink(path, max_bytes=100, backups=3)
    seen: list[str] = []
    follower = LogFollower(tmp_path, None, seen.append)
    written = 0
    for burst in (3, 5, 8, 1):  # between polls: no rotation, one, several, then a short tail
        for _ in range(burst):
            sink.write(f"line {written:03d} {'y' * 20}\n".encode())
            written += 1
        follower.poll()
    sink.close()
    follower.poll(final=True)
    assert [line.split()[2] for line in seen] == [f"{i:03d}" for i in range(written)]
    assert path.with_name("worker-0.log.3").exists() and not path.with_name("worker-0.log.4").exists()
    # the dashboard's reader at an offset past the new file's end (it was reading the old one) starts it over
    chunk = read_chunk(path, 10_000)
    assert chunk.start == 0 and chunk.lines == path.read_text().splitlines()


def test_a_reader_outrun_by_rotations_skips_only_what_is_gone_and_repeats_nothing(tmp_path):
    from toolkit.jobs.storage.logs import LogFollower
    from toolkit.launcher._rotate import RotatingLogSink

    sink = RotatingLogSink(tmp_path / "worker-0.log", max_bytes=100, backups=2)
    seen: list[str] = []
    follower = LogFollower(tmp_path, None, seen.append)
    for i in range(40):
        sink.write(f"line {i:03d} {'y' * 20}\n".encode())
        if i in (1, 39):
            follower.poll()
    sink.close()
    numbers = [int(line.split()[2]) for line in seen]
    on_disk = [int(line.split()[1]) for name in ("worker-0.log.2", "worker-0.log.1", "worker-0.log")
               for line in (tmp_path / name).read_text().splitlines()]
    assert numbers == [0, 1, *on_disk]  # what it had read, then every line still kept: none twice, in order


# ---- the port race without a network namespace ------------------------------------------------------------------
_SQUATTER = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
             "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); print('listening', time.time(), flush=True); "
             "time.sleep(float(sys.argv[2]))")


@pytest.fixture
def unprivileged_ports(monkeypatch):
    """Root's local tasks get ports no other user can bind (below ip_unprivileged_port_start); these tests play
    a kernel that lets every user bind every port (start 0, as in some containers), so the watch is what guards."""
    from toolkit.launcher import _portwatch

    monkeypatch.setattr(_portwatch, "_UNPRIVILEGED_START", "/nonexistent/ip_unprivileged_port_start")


def test_roots_local_tasks_get_ports_no_other_user_can_bind(tmp_path, no_orphans):
    user = _nobody()
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start <= 512 or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip(f"needs a kernel that keeps ports below 512 or more to root (it keeps {start}), and "
                    "/usr/bin/python3 for the other user's bind")
    show = "import json, os; print('port', json.loads(os.environ['TF_CONFIG'])['cluster']['worker'][1].split(':')[1])"
    result = launch(["python", "-c", show], workers=2, job_dir=tmp_path / "job", echo=False, isolate=False)
    assert result.exit_code == 0, result.message
    port = int((tmp_path / "job" / "logs" / "worker-1.log").read_text().split()[1])
    assert 512 <= port < start
    bind = "import socket, sys; socket.socket().bind(('0.0.0.0', int(sys.argv[1])))"
    squat = subprocess.run(["/usr/bin/python3", "-c", bind, str(port)], user=user.pw_uid, group=user.pw_gid,
                           extra_groups=[], capture_output=True, text=True, timeout=30)
    assert squat.returncode != 0 and "Permission denied" in squat.stderr  # the race cannot even begin


def _squat(user: pwd.struct_passwd, port: int, seconds: float) -> subprocess.Popen:
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3 for the second user's listener")
    return subprocess.Popen(["/usr/bin/python3", "-c", _SQUATTER, str(port), str(seconds)], user=user.pw_uid,
                            group=user.pw_gid, extra_groups=[], stdout=subprocess.PIPE, text=True)


def test_a_port_taken_between_pick_and_start_fails_the_launch_before_any_task_starts(tmp_path, monkeypatch,
                                                                                   unprivileged_ports, no_orphans):
    import tf_config.ports

    user = _nobody()
    port = tf_config.ports.pick_port()
    squatter = _squat(user, port, 30)
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().startswith("listening")
        # the race lost: the port was free when picked, and another user listens on it before the task binds it
        monkeypatch.setattr(tf_config.ports, "pick_ports", lambda count: [port] * count)
        marker = tmp_path / "task-ran"
        result = launch(["python", "-c", f"open({str(marker)!r}, 'w').close()"], job_dir=tmp_path / "job",
                        echo=False, isolate=False, timeout=60)
        assert result.exit_code == 1 and result.reason == "failed", result.message
        assert result.message.startswith(f"port {port} of worker-0 is listened on by uid {user.pw_uid}, another user")
        assert not marker.exists()  # no task started, so none could talk to their socket
    finally:
        squatter.kill()
        squatter.wait(timeout=30)


def test_a_port_taken_while_the_task_starts_stops_it_within_milliseconds(tmp_path, unprivileged_ports, no_orphans):
    user = _nobody()
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3 for the second user's listener")
    # the task hands its own port to `nobody` before binding it, and reports that it is alive every 2 ms
    task = f"""
import json, os, subprocess, sys, time
port = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][0].rpartition(":")[2]
subprocess.Popen(["/usr/bin/python3", "-c", {_SQUATTER!r}, port, "20"], user={user.pw_uid}, group={user.pw_gid},
                 extra_groups=[])
while True:
    print("alive", time.time(), flush=True)
    time.sleep(0.002)
"""
    result = launch(["python", "-c", task], job_dir=tmp_path / "job", echo=False, isolate=False, timeout=60)
    assert result.exit_code == 1 and "of worker-0 is listened on by uid" in result.message, result.message
    lines = (tmp_path / "job" / "logs" / "worker-0.log").read_text().splitlines()
    listening = next(float(line.split()[1]) for line in lines if line.startswith("listening"))
    last_alive = max(float(line.split()[1]) for line in lines if line.startswith("alive"))
    # 10-120 ms measured (benchmarks/history/2026-11-28-port-race-and-full-store.md); a look a second took 0.9 s
    assert last_alive - listening < 0.5, f"the task ran {last_alive - listening:.3f} s past the foreign listen"


def test_a_submitted_jobs_logs_rotate_and_stream_logs_reads_the_newest_output(tmp_path, monkeypatch, no_orphans):
    from _polling import wait_until

    from toolkit.cli import main

    package = tmp_path / "pkg" / "talker"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(_NUMBERED)
    home = tmp_path / "home"
    monkeypatch.setenv("TFDIST_HOME", str(home))
    assert main(["jobs", "submit", "training", "talk", "--module-name", "talker.task", "--package-path",
                 str(package), "--max-log-bytes", "1000", "--log-backups", "2", "--no-isolate"]) == 0
    from toolkit.jobs import JobState, api

    record = wait_until(lambda: (r := api.describe("talk")).is_final and r, timeout=60, what="the job to end")
    assert record.state is JobState.SUCCEEDED, record.error
    logs = home / "jobs" / "talk" / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["master-0.log", "master-0.log.1", "master-0.log.2"]
    assert "rotated" in record.details["logProblems"]["master-0"]
    seen: list[str] = []
    api.stream_logs("talk", sink=seen.append, follow=False)
    assert seen[-1].startswith("[master-0] line 059 ")  # the newest output is kept, and read
