"""Local backend pieces that need no cluster: planning, log following, dead-supervisor reaping."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _polling import wait_until

from toolkit.cli import main
from toolkit.jobs import JobSpec, JobSpecError, JobState, JobStore, api
from toolkit.jobs.engines.local import _local_plan
from toolkit.jobs.engines.local import backend as local
from toolkit.jobs.engines.local._local_plan import plan_local
from toolkit.jobs.engines.local._procs import is_alive, start_ticks
from toolkit.jobs.storage.logs import LogFollower

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
TRAINER = FIXTURES / "trainer"


def _spec(**fields) -> JobSpec:
    return JobSpec.from_dict({}, job_id="local-job", overrides={"pythonModule": "trainer.probe", **fields})


def test_plan_runs_the_module_from_the_package_parent(tmp_path):
    plan, warnings = plan_local(_spec(packagePath=str(TRAINER), jobDir="out", args=["--seconds", "1"]), cwd=tmp_path)
    assert plan.argv == [sys.executable, "-m", "trainer.probe", "--seconds", "1", "--job-dir", str(tmp_path / "out")]
    assert plan.pythonpath == (str(FIXTURES),) and plan.cwd == str(FIXTURES)
    assert plan.counts == {"master": 1} and plan.primary == "master" and warnings == []
    assert _local_plan.LocalPlan.from_dict(plan.to_dict()) == plan


def test_plan_runs_a_master_with_parameter_servers_and_no_workers(tmp_path):
    # CMLE's CUSTOM tier: workerCount and parameterServerCount are each optional; the master trains (TF1, Estimator)
    plan, _ = plan_local(_spec(scaleTier="CUSTOM", masterType="standard", parameterServerType="standard",
                               parameterServerCount=2), cwd=tmp_path)
    assert plan.counts == {"master": 1, "ps": 2}


def test_plan_without_job_dir_passes_none_like_cmle(tmp_path):
    plan, _ = plan_local(_spec(), cwd=tmp_path)
    assert "--job-dir" not in plan.argv and plan.cwd == str(tmp_path)


@pytest.mark.parametrize("fields,field,text", [
    ({"packagePath": "nowhere"}, "trainingInput.packagePath", "which is not a directory"),
    ({"packagePath": str(TRAINER), "pythonModule": "other.task"}, "trainingInput.pythonModule",
     "the module must be inside it. Use pythonModule trainer.<module>."),
    ({"packageUris": ["gs://bucket/trainer.tar.gz"]}, "trainingInput.packageUris[0]", "no network access"),
    ({"jobDir": "gs://bucket/out"}, "trainingInput.jobDir", "Set jobDir to a local path"),
])
def test_plan_refuses_what_cannot_run_here(tmp_path, fields, field, text):
    with pytest.raises(JobSpecError) as info:
        plan_local(_spec(**fields), cwd=tmp_path)
    assert info.value.field == field and text in str(info.value)


def test_plan_accepts_local_archives_and_refuses_sdists(tmp_path):
    (tmp_path / "pkg.whl").write_bytes(b"")
    (tmp_path / "pkg.tar.gz").write_bytes(b"")
    plan, _ = plan_local(_spec(packageUris=["pkg.whl"]), cwd=tmp_path)
    assert plan.pythonpath == (str(tmp_path / "pkg.whl"),)
    with pytest.raises(JobSpecError, match="a source archive must be installed first"):
        plan_local(_spec(packageUris=["pkg.tar.gz"]), cwd=tmp_path)


def test_container_only_specs_need_kubernetes(tmp_path):
    spec = JobSpec.from_dict({"trainingInput": {"masterConfig": {"imageUri": "me/trainer:1"}}}, job_id="c")
    with pytest.raises(JobSpecError, match="submit with `backend='kubernetes'`"):
        plan_local(spec, cwd=tmp_path)


def test_fields_with_no_local_meaning_are_warned_about(tmp_path):
    spec = JobSpec.from_file(FIXTURES / "cmle_custom.yaml", job_id="w",
                             overrides={"runtimeVersion": "2.11", "pythonVersion": "3.7"})
    _, warnings = plan_local(spec, cwd=tmp_path)
    text = "\n".join(warnings)
    assert "region 'us-central1' is recorded" in text
    assert "machine types (n1-highmem-8, n1-standard-8) are recorded" in text
    assert "runtimeVersion 2.11 is requested; this environment has TensorFlow 2.21" in text
    assert "pythonVersion 3.7 is requested" in text


def test_predefined_tiers_scale_down_to_this_machine_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(_local_plan, "local_capacity", lambda: (8, "2 CPUs and 23 GiB hold 8 tasks"))
    plan, warnings = plan_local(_spec(scaleTier="PREMIUM_1"), cwd=tmp_path)
    assert plan.counts == {"master": 1, "worker": 4, "ps": 3}
    assert warnings[0] == ("scaleTier PREMIUM_1 means 1 master + 19 worker + 11 ps; 2 CPUs and 23 GiB hold 8 "
                           "tasks, so the local backend runs 1 master + 4 worker + 3 ps. Use scaleTier CUSTOM "
                           "to choose counts.")
    plan, _ = plan_local(_spec(scaleTier="STANDARD_1"), cwd=tmp_path)
    assert plan.counts == {"master": 1, "worker": 4, "ps": 3}  # fits: honoured exactly
    custom = _spec(scaleTier="CUSTOM", masterType="standard", workerType="standard", workerCount=12)
    plan, warnings = plan_local(custom, cwd=tmp_path)
    assert plan.counts == {"master": 1, "worker": 12} and "expect it to be slow" in warnings[0]


def test_log_follower_prefixes_complete_lines_and_filters_tasks(tmp_path):
    lines: list[str] = []
    follower = LogFollower(tmp_path, None, lines.append)
    assert follower.poll() == 0  # no files yet
    (tmp_path / "worker-1.log").write_bytes(b"one\ntw")
    (tmp_path / "ps-0.log").write_bytes(b"[ps-0] already prefixed\n")
    follower.poll()
    assert lines == ["[ps-0] already prefixed", "[worker-1] one"]
    with open(tmp_path / "worker-1.log", "ab") as fh:
        fh.write(b"o\nthree")
    follower.poll()
    assert lines[-1] == "[worker-1] two"
    follower.poll(final=True)
    assert lines[-1] == "[worker-1] three"
    only: list[str] = []
    LogFollower(tmp_path, ["ps-0"], only.append).poll(final=True)
    assert only == ["[ps-0] already prefixed"]


_NONCE = "0123456789abcdef0123456789abcdef"


def _detached(*argv: str) -> subprocess.Popen:
    """A process of the job: it carries the job's nonce, as the supervisor and its tasks do."""
    return subprocess.Popen(list(argv), start_new_session=True, env={**os.environ, "TFDIST_JOB_NONCE": _NONCE})


def _job_with_processes(tmp_path, supervisor: subprocess.Popen, task: subprocess.Popen) -> JobStore:
    store = JobStore(tmp_path)
    store.create("reap-me", backend="local", spec={}, details={"tasks": ["master-0"]})
    store.transition("reap-me", JobState.PREPARING)
    store.transition("reap-me", JobState.RUNNING)
    store.set_supervisor("reap-me", pid=supervisor.pid, start_ticks=start_ticks(supervisor.pid),
                         host=socket.gethostname(), nonce=_NONCE)
    store.update_task("reap-me", "master-0", state="RUNNING", pid=task.pid, pid_start=start_ticks(task.pid))
    return store


def test_a_dead_supervisor_fails_its_job_and_its_tasks_are_stopped(tmp_path, monkeypatch, no_orphans):
    monkeypatch.setattr(local, "HEARTBEAT_INTERVAL", 0.01)
    supervisor = _detached(sys.executable, "-c", "pass")
    supervisor.wait(timeout=60)
    task = _detached("sleep", "120")
    store = _job_with_processes(tmp_path, supervisor, task)
    record = wait_until(lambda: (r := api.describe("reap-me", home=tmp_path)).state is JobState.FAILED and r,
                        timeout=30, what="the job of a dead supervisor to be failed")
    assert record.error.startswith(f"supervisor died (pid {supervisor.pid})")
    assert task.wait(timeout=30) == -15  # SIGTERM to the task's process group
    assert store.get("reap-me").history[-1].state is JobState.FAILED


def test_a_live_supervisor_is_left_alone_and_cancel_signals_it(tmp_path, monkeypatch, no_orphans):
    monkeypatch.setattr(local, "HEARTBEAT_INTERVAL", 0.01)
    supervisor = _detached("sleep", "120")
    task = _detached("sleep", "120")
    _job_with_processes(tmp_path, supervisor, task)
    time.sleep(0.1)
    assert api.describe("reap-me", home=tmp_path).state is JobState.RUNNING
    record = api.cancel("reap-me", home=tmp_path, timeout=20)
    assert record.state is JobState.CANCELLED
    assert supervisor.wait(timeout=30) == -15 and task.wait(timeout=30) == -15
    assert not is_alive(task.pid)
    assert [h.state.value for h in record.history][-2:] == ["CANCELLING", "CANCELLED"]


def test_local_submit_refuses_untunable_names_and_kubernetes_options(tmp_path):
    spec = JobSpec.from_file(FIXTURES / "hptuning.yaml", job_id="h" * 60)
    with pytest.raises(JobSpecError, match="its trials are named like 'h{60}-trial-8'"):
        api.submit(spec, home=tmp_path)
    assert JobStore(tmp_path).names() == []  # nothing recorded, no supervisor started
    with pytest.raises(JobSpecError, match="applies to the kubernetes backend only"):
        api.submit(_spec(), home=tmp_path, namespace="ml")


def test_cli_errors_map_to_documented_exit_codes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path))
    assert main(["jobs", "describe", "ghost"]) == 3
    assert "no job named 'ghost'" in capsys.readouterr().err
    assert main(["jobs", "list"]) == 0 and "Listed 0 items." in capsys.readouterr().err
    assert main(["jobs", "submit", "training", "Bad_Name", "--module-name", "m"]) == 2
    assert main(["jobs", "submit", "training", "t" * 60, "--config", str(FIXTURES / "hptuning.yaml")]) == 1
    assert "Use a job name of at most 55 characters" in capsys.readouterr().err
    assert main(["jobs", "submit", "training", "ok", "--module-name", "m", "--dry-run"]) == 2
    assert "--dry-run renders a TFJob" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["jobs", "submit", "training", "ok", "--backend", "cloud"])
    assert info.value.code == 2


def test_local_train_runs_the_module_in_the_foreground(tmp_path, monkeypatch, capfd, no_orphans):
    monkeypatch.chdir(tmp_path)
    code = main(["local", "train", "--module-name", "trainer.probe", "--package-path", str(TRAINER),
                 "--job-dir", "out", "--", "--marker", "fg", "--exit-code", "3"])
    assert code == 3
    assert "probe local-0 started fg" in capfd.readouterr().out
    seen = json.loads((tmp_path / "out" / "local-0.json").read_text())
    assert seen["tf_config"]["cluster"] == {} and seen["tf_config"]["environment"] == "cloud"
    assert seen["tf_config"]["job"]["pythonModule"] == "trainer.probe"
    assert seen["argv"] == ["--marker", "fg", "--exit-code", "3", "--job-dir", str(tmp_path / "out")]
    assert seen["cwd"] == str(FIXTURES)  # gcloud runs the trainer from the package's parent
    assert main(["local", "train", "--module-name", "trainer.probe", "--distributed", "--worker-count", "-2"]) == 2
    assert "--worker-count: received -2" in capfd.readouterr().err


def test_cmle_dialect_writes_cmle_tf_config():
    from tf_config import TFConfig, generate
    from toolkit.jobs.engines.local._run import task_name
    from toolkit.launcher import cmle_dialect

    chief = next(c for c in generate(workers=1, ps=1) if c.task_type == "chief")
    master = cmle_dialect(job={"scaleTier": "CUSTOM"}).apply(chief)
    assert isinstance(master, TFConfig) and master.task_type == "master" and master.is_chief
    assert set(master.cluster) == {"master", "worker", "ps"} and master.cluster["master"] == chief.cluster["chief"]
    assert (master.environment, master.job) == ("cloud", {"scaleTier": "CUSTOM"})
    kept = cmle_dialect(job={}, use_chief=True).apply(chief)
    assert kept.task_type == "chief" and "master" not in kept.cluster and kept.environment == "cloud"
    # the names of log files written before the launcher spoke the dialect
    assert (task_name("chief-0", "master"), task_name("worker-1", "master"), task_name("chief-0", "chief")) == (
        "master-0", "worker-1", "chief-0")
