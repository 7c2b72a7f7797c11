"""A careless co-user or an attacker on the same machine cannot steer a job: issue 41's vectors 1-7.

Each test plays the other user as ``nobody`` where it needs one: the directory or file is created, then
handed to ``nobody`` with ``chown`` (root only; skipped with the reason elsewhere). The victim's jobs run as
this test's user. What is asserted is the artifact: the victim's file unchanged, the error naming the path,
its owner and the fix, the process still alive, the study not hung.
"""
from __future__ import annotations

import json
import os
import pwd
import socket
import stat
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _polling import wait_until

from toolkit._owned import UnsafePathError, open_regular, write_new
from toolkit.jobs import JobSpec, JobSpecError, JobState, JobStore, api
from toolkit.jobs.engines.local import _supervised
from toolkit.jobs.engines.local._local_plan import plan_local
from toolkit.jobs.engines.local._procs import start_ticks
from toolkit.jobs.errors import BackendError
from toolkit.launcher import LaunchError, launch


def _nobody() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("needs root: a second local user's files are made with chown")
    return pwd.getpwnam("nobody")


def _give(path: Path, user: pwd.struct_passwd) -> Path:
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    return path


# ---- vector 1: a job dir pre-created by another user, full of symlinks --------------------------------------
def test_a_job_dir_another_user_created_is_refused_and_nothing_is_written_through_it(tmp_path):
    user = _nobody()
    victim = tmp_path / "victim.txt"
    victim.write_text("root's private data")
    victim.chmod(0o600)
    planted = tmp_path / "planted"
    (planted / "logs").mkdir(parents=True)
    for name in ("cluster.json", "logs/worker-0.log"):
        (planted / name).symlink_to(victim)
    for path in (planted / "logs", planted):
        _give(path, user)
    with pytest.raises(LaunchError) as info:
        launch(["python", "-c", "print('hello')"], job_dir=planted, echo=False, isolate=False)
    message = str(info.value)
    assert f"refusing the job directory (job_dir) {planted}: it belongs to nobody (uid {user.pw_uid})" in message
    assert "Fix: remove it, or use a directory of your own" in message and "\n" not in message
    assert victim.read_text() == "root's private data"


def test_a_job_dir_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(LaunchError, match=r"it can be written by every user \(mode 0777\)"):
        launch(["python", "-c", "pass"], job_dir=shared, echo=False, isolate=False)


def test_files_are_replaced_never_written_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "out").symlink_to(victim)
    write_new(tmp_path / "out", "new")
    assert victim.read_text() == "keep" and (tmp_path / "out").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o600


# ---- vector 2: a home or a job's directory another user owns; the supervisor's cwd ----------------------
def test_a_home_another_user_owns_is_refused(tmp_path):
    user = _nobody()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    _give(home, user)
    with pytest.raises(BackendError) as info:
        JobStore(home)
    assert f"refusing the tfdist home {home}: it belongs to nobody" in str(info.value)
    assert "export TFDIST_HOME=~/.tfdist" in str(info.value)


def test_a_jobs_directory_another_user_made_first_is_refused_at_submit(tmp_path, monkeypatch):
    user = _nobody()
    home = tmp_path / "home"
    JobStore(home)
    (home / "jobs").mkdir(mode=0o755)
    _give(home / "jobs", user)
    monkeypatch.chdir(tmp_path)
    spec = JobSpec.from_dict({}, job_id="mine", overrides={"pythonModule": "trainer.probe"})
    with pytest.raises(BackendError, match=rf"refusing the jobs directory {home / 'jobs'}: it belongs to nobody"):
        api.submit(spec, home=home)


def test_the_supervisor_does_not_import_from_its_job_directory(tmp_path, monkeypatch, no_orphans):
    home = tmp_path / "home"
    planted = home / "jobs" / "cwd-job" / "toolkit"
    JobStore(home)
    planted.mkdir(parents=True)
    marker = tmp_path / "planted-ran"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    package = tmp_path / "pkg" / "quick"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("print('trained')\n")
    spec = JobSpec.from_dict({"trainingInput": {"packagePath": str(package), "pythonModule": "quick.task"}},
                             job_id="cwd-job")
    api.submit(spec, home=home)
    record = wait_until(lambda: (r := api.describe("cwd-job", home=home)).is_final and r, timeout=60,
                        what="the job to end")
    assert record.state is JobState.SUCCEEDED, record.error
    assert not marker.exists()  # `python -P -m toolkit.jobs.engines.local.supervisor`: its cwd is not on sys.path


# ---- vector 3: a package whose parent others can write; a shadowed sitecustomize ---------------------------
def test_a_package_in_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "tmp"
    (shared / "trainer").mkdir(parents=True)
    shared.chmod(0o1777)
    spec = JobSpec.from_dict({"trainingInput": {"packagePath": str(shared / "trainer"),
                                                "pythonModule": "trainer.task"}}, job_id="pkg")
    with pytest.raises(JobSpecError) as info:
        plan_local(spec, cwd=tmp_path)
    assert info.value.field == "trainingInput.packagePath"
    assert f"refusing the directory {shared}: it can be written by every user (mode 1777)" in str(info.value)


def test_the_launcher_hook_never_runs_a_sitecustomize_others_could_plant(tmp_path, no_orphans):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    marker = tmp_path / "planted-ran"
    (shared / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = launch(["python", "-c", "print('task ran')"], job_dir=tmp_path / "job", echo=False, isolate=False,
                    env={"PYTHONPATH": str(shared)})
    assert result.exit_code == 0
    assert not marker.exists()
    log = (tmp_path / "job" / "logs" / "worker-0.log").read_text()
    assert "task ran" in log and f"tfdist: not running {shared / 'sitecustomize.py'}" in log


# ---- vector 4: a forged record naming someone else's process ----------------------------------------------
def test_the_reaper_signals_no_process_that_lacks_the_jobs_nonce(tmp_path, monkeypatch, no_orphans):
    monkeypatch.setattr(_supervised, "HEARTBEAT_INTERVAL", 0.01)
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)  # not the job's: no nonce in its env
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    store = JobStore(tmp_path)
    store.create("forged", backend="local", spec={}, details={"tasks": ["master-0"]})
    store.transition("forged", JobState.PREPARING)
    store.transition("forged", JobState.RUNNING)
    store.set_supervisor("forged", pid=dead.pid, start_ticks=start_ticks(dead.pid), host=socket.gethostname(),
                         nonce="the-forgers-guess")
    store.update_task("forged", "master-0", state="RUNNING", pid=victim.pid, pid_start=start_ticks(victim.pid))
    try:
        record = wait_until(lambda: (r := api.describe("forged", home=tmp_path)).is_final and r, timeout=30,
                            what="the dead supervisor's job to be reaped")
        assert record.state is JobState.FAILED
        assert victim.poll() is None  # its pid and start time matched, but it is not provably the job's
    finally:
        victim.kill()
        victim.wait(timeout=30)


# ---- vector 5: a trial directory with planted, hostile or blocking files ------------------------------------
def test_a_planted_metric_file_of_another_user_is_not_read(tmp_path):
    from toolkit.jobs.tuning._metric_file import MetricFile

    user = _nobody()
    (tmp_path / "hypertune").mkdir()
    planted = tmp_path / "hypertune" / "output.metrics"
    planted.write_text(json.dumps({"accuracy": 1000000, "global_step": 1}) + "\n")
    _give(planted, user)
    metrics = MetricFile(tmp_path)
    metrics.path = planted
    assert metrics.poll() is False and metrics.series() == {}


def test_hostile_metric_lines_are_skipped_not_fatal(tmp_path):
    from toolkit.jobs.tuning._metric_file import MetricFile

    (tmp_path / "m").write_text("\n".join([
        '{"accuracy": 0.5, "global_step": Infinity}', '{"accuracy": 0.5, "global_step": NaN}',
        '{"accuracy": 0.5, "global_step": "' + "9" * 5000 + '"}', '{"accuracy": 0.5, "global_step": 1e400}',
        '{"accuracy": 0.7, "global_step": 3}']) + "\n")
    metrics = MetricFile(tmp_path)
    metrics.path = tmp_path / "m"
    assert metrics.poll() is True
    assert [p[1:] for p in metrics.series()["accuracy"]] == [(3, 0.7)]


def _record(payload: bytes, length: int | None = None) -> bytes:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    header = struct.pack("<Q", len(payload) if length is None else length)
    return header + struct.pack("<I", masked_crc32c(header)) + payload + struct.pack("<I", masked_crc32c(payload))


def test_an_event_record_claiming_a_terabyte_and_a_fifo_neither_hang_nor_fail_the_study(tmp_path):
    from toolkit.jobs.tuning._objective import read_scalars

    (tmp_path / "events.out.tfevents.1.huge").write_bytes(_record(b"", length=2 ** 40))
    os.mkfifo(tmp_path / "events.out.tfevents.2.fifo")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from toolkit.jobs.tuning._objective import read_scalars
        print(read_scalars({str(tmp_path)!r}))""")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "{}", done.stderr
    assert "an event record of 1,099,511,627,776 bytes" in done.stderr
    assert "refusing to read" in done.stderr and "not a regular file" in done.stderr
    assert read_scalars(tmp_path) == {}


def test_a_symlinked_trials_plot_is_replaced_not_written_through(tmp_path):
    from toolkit.jobs.tuning.plot import plot_trials

    victim = tmp_path / "victim.png"
    victim.write_bytes(b"root's image")
    (tmp_path / "trials.png").symlink_to(victim)
    output = {"goal": "MAXIMIZE", "hyperparameterMetricTag": "accuracy",
              "trials": [{"trialId": "1", "state": "SUCCEEDED", "finalMetric": {"objectiveValue": 0.5},
                          "allMetrics": [{"trainingStep": 1, "objectiveValue": 0.5}]}]}
    plot_trials(output, tmp_path / "trials.png")
    assert victim.read_bytes() == b"root's image"
    assert (tmp_path / "trials.png").read_bytes().startswith(b"\x89PNG") and not (tmp_path / "trials.png").is_symlink()


def test_open_regular_refuses_a_symlink(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="is a symlink"):
        open_regular(tmp_path / "link")


# ---- vector 6: the shutdown signal directory cannot be taken first ---------------------------------------
def test_a_guessable_signal_directory_another_user_made_does_not_stop_a_launch(tmp_path, monkeypatch, no_orphans):
    user = _nobody()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("TFDIST_SIGNAL_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    taken = tmp_path / f"tfdist-{os.getuid()}"
    taken.mkdir()
    _give(taken, user)
    probe = ("import os, stat; from strategies._signals import ensure_private_dir; d = ensure_private_dir(); "
             "print('signals in', d, oct(stat.S_IMODE(os.stat(d).st_mode)))")
    result = launch(["python", "-c", probe], job_dir=tmp_path / "job", echo=False, isolate=False)
    assert result.exit_code == 0, result.message
    line = (tmp_path / "job" / "logs" / "worker-0.log").read_text().split("signals in ")[1].split()
    assert line[1] == "0o700" and Path(line[0]).name.startswith("tfdist-signals-") and line[0] != str(taken)
    assert not Path(line[0]).exists()  # removed with the job


# ---- vector 7: job files are private under --no-isolate too ----------------------------------------------
def test_cluster_json_is_private(tmp_path, no_orphans):
    result = launch(["python", "-c", "pass"], job_dir=tmp_path / "job", echo=False, isolate=False, workers=2)
    assert result.exit_code == 0
    assert stat.S_IMODE((tmp_path / "job" / "cluster.json").stat().st_mode) == 0o600


def test_a_dead_supervisor_whose_clock_jumped_forward_does_not_leave_its_job_running(tmp_path, monkeypatch):
    import sqlite3
    import time

    monkeypatch.setattr(_supervised, "HEARTBEAT_INTERVAL", 0.01)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    store = JobStore(tmp_path)
    store.create("jumped", backend="local", spec={}, details={"tasks": ["master-0"]})
    store.transition("jumped", JobState.PREPARING)
    store.transition("jumped", JobState.RUNNING)
    store.set_supervisor("jumped", pid=dead.pid, start_ticks=start_ticks(dead.pid), host=socket.gethostname())
    with sqlite3.connect(tmp_path / "jobs.db") as conn:  # its last beat, stamped by a clock a day ahead
        conn.execute("UPDATE jobs SET heartbeat_at = ? WHERE name = 'jumped'", (time.time() + 86400,))
    record = api.describe("jumped", home=tmp_path)
    assert record.state is JobState.FAILED and record.error.startswith(f"supervisor died (pid {dead.pid})")


def test_a_port_another_user_listens_on_stops_a_job_without_isolation(tmp_path, monkeypatch, no_orphans):
    from toolkit.launcher import _portwatch

    user = _nobody()
    # a kernel that lets every user bind every port (as root, tasks would get ports only root can bind)
    monkeypatch.setattr(_portwatch, "_UNPRIVILEGED_START", "/nonexistent/ip_unprivileged_port_start")
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3 for the second user's listener")
    # the task plays both parts: it hands its own port to `nobody`, who listens on it, then waits
    squatter = ("import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                "s.bind(('0.0.0.0', int(__import__('sys').argv[1]))); s.listen(); time.sleep(30)")
    task = textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        port = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][0].rpartition(":")[2]
        subprocess.Popen(["/usr/bin/python3", "-c", {squatter!r}, port], user={user.pw_uid}, group={user.pw_gid},
                         extra_groups=[])
        time.sleep(30)
    """)
    result = launch(["python", "-c", task], job_dir=tmp_path / "job", echo=False, isolate=False, timeout=60)
    assert result.exit_code == 1 and result.reason == "failed", result.message
    assert f"of worker-0 is listened on by uid {user.pw_uid}, another user" in result.message
    assert result.duration < 20


# ---- vector 8: what another user sees of a running task (docs/security.md's advice) -------------------------
def test_another_user_sees_a_tasks_arguments_but_not_its_environment(tmp_path):
    user = _nobody()
    proc = subprocess.Popen(["sleep", "30"], env={"API_TOKEN": "in-the-environment"})
    try:
        def peek(name: str) -> subprocess.CompletedProcess:
            return subprocess.run(["cat", f"/proc/{proc.pid}/{name}"], user=user.pw_uid, group=user.pw_gid,
                                  extra_groups=[], capture_output=True, timeout=30)

        assert peek("cmdline").stdout == b"sleep\x0030\x00"  # arguments: public, as docs/security.md says
        denied = peek("environ")
        assert denied.returncode != 0 and b"in-the-environment" not in denied.stdout  # the environment: private
    finally:
        proc.kill()
        proc.wait(timeout=30)
