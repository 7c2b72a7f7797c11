"""Real local jobs: submitted, followed, cancelled and orphaned, through the CLI and the store.

Each job's supervisor is detached (its own session) and its tasks are started by
the launcher, so besides the ``no_orphans`` fixture every test checks that the
pids the job recorded (supervisor and tasks) are gone.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _polling import wait_until

from toolkit.cli import main
from toolkit.jobs import JobState, JobStore, api
from toolkit.jobs.engines.local._procs import is_alive

pytestmark = pytest.mark.cluster
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
TRAINER = str(FIXTURES / "trainer")


def _recorded_pids(home: Path, job: str) -> list[int]:
    store = JobStore(home)
    return [store.supervisor(job).pid] + [pid for _, pid, _ in store.task_processes(job)]


def _assert_all_gone(home: Path, job: str) -> None:
    pids = _recorded_pids(home, job)
    wait_until(lambda: not any(is_alive(p) for p in pids), timeout=30, what=f"every process of {job} to exit")


def _write_config(tmp_path: Path, **training_input) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"trainingInput": training_input}))
    return str(path)


def test_parameter_server_job_submitted_listed_described_streamed_completed(home, tmp_path, capsys, no_orphans,
                                                                           monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # the console's default noise filter
    config = _write_config(tmp_path, scaleTier="CUSTOM", masterType="standard", workerType="standard",
                           workerCount=2, parameterServerType="standard", parameterServerCount=1,
                           useChiefInTfConfig=True, region="us-central1")
    out_dir = tmp_path / "out"
    assert main(["jobs", "submit", "training", "pss-job", "--config", config, "--module-name", "trainer.task",
                 "--package-path", TRAINER, "--job-dir", str(out_dir), "--", "--steps", "200"]) == 0
    submitted = capsys.readouterr()
    assert "Job [pss-job] submitted successfully." in submitted.out
    assert "$ tfdist jobs stream-logs pss-job" in submitted.out
    assert "region 'us-central1' is recorded" in submitted.err

    assert main(["jobs", "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["JOB_ID", "BACKEND", "STATUS", "CREATED"]
    assert listing[1].split()[:2] == ["pss-job", "local"]

    assert main(["jobs", "stream-logs", "pss-job"]) == 0  # follows until the job ends
    logs = capsys.readouterr()
    assert "[chief-0] training 200 steps on 2 workers and 1 ps" in logs.out
    assert "[chief-0] step 200 loss" in logs.out
    assert any(line.startswith("[worker-1] ") for line in logs.out.splitlines())
    # the ps prints only TensorFlow's start-up noise: off the console by default, kept in its log
    assert not any(line.startswith("[ps-0] ") for line in logs.out.splitlines())
    assert "Started server with target" in (home / "jobs" / "pss-job" / "logs" / "ps-0.log").read_text()
    assert "Job [pss-job] ended SUCCEEDED." in logs.err

    assert main(["jobs", "describe", "pss-job", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["state"] == "SUCCEEDED" and record["exitCode"] == 0
    assert [h["state"] for h in record["history"]] == ["QUEUED", "PREPARING", "RUNNING", "SUCCEEDED"]
    tasks = {t["name"]: t for t in record["tasks"]}
    assert set(tasks) == {"chief-0", "worker-0", "worker-1", "ps-0"}
    assert tasks["chief-0"]["exitCode"] == 0 and all(t["pid"] for t in tasks.values())
    assert all(t["exitCode"] == 0 for t in tasks.values()), tasks  # servers left on the chief's goodbye
    result = json.loads((out_dir / "result.json").read_text())
    assert result["steps"] == 200 and result["loss"] < 0.01
    _assert_all_gone(home, "pss-job")


def test_cancel_mid_run_stops_every_process(home, tmp_path, capsys, no_orphans):
    config = _write_config(tmp_path, scaleTier="CUSTOM", masterType="standard", workerType="standard",
                           workerCount=1, parameterServerType="standard", parameterServerCount=1,
                           useChiefInTfConfig=True)
    assert main(["jobs", "submit", "training", "long-job", "--config", config, "--module-name", "trainer.task",
                 "--package-path", TRAINER, "--job-dir", str(tmp_path / "out"), "--",
                 "--steps", "1000000", "--log-every", "100"]) == 0
    chief_log = home / "jobs" / "long-job" / "logs" / "chief-0.log"
    wait_until(lambda: chief_log.exists() and "step 100 " in chief_log.read_text(), timeout=180,
          what="training to start")
    running = api.describe("long-job")
    assert running.state is JobState.RUNNING and len(running.tasks) == 3
    capsys.readouterr()
    started = time.monotonic()
    assert main(["jobs", "cancel", "long-job"]) == 0
    assert time.monotonic() - started < 30
    assert capsys.readouterr().out.strip() == "Job [long-job] is CANCELLED."
    record = api.describe("long-job")
    assert [h.state.value for h in record.history][-2:] == ["CANCELLING", "CANCELLED"]
    _assert_all_gone(home, "long-job")
    assert main(["jobs", "stream-logs", "long-job", "--task", "chief-0"]) == 4
    assert "[chief-0] step 100 " in capsys.readouterr().out
    assert main(["jobs", "cancel", "long-job"]) == 1


def test_job_outlives_the_cli_and_a_killed_supervisor_ends_failed(home, tmp_path, no_orphans):
    cli = subprocess.run([sys.executable, "-m", "toolkit", "jobs", "submit", "training", "orphan-job",
                          "--module-name", "trainer.probe", "--package-path", TRAINER, "--scale-tier", "STANDARD_1",
                          "--job-dir", str(tmp_path / "out"), "--", "--seconds", "300"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr  # the CLI has exited; the detached supervisor runs on
    store = JobStore(home)
    wait_until(lambda: len(store.task_processes("orphan-job")) == 8, timeout=60, what="8 tasks to start")
    assert api.describe("orphan-job").state is JobState.RUNNING
    os.kill(store.supervisor("orphan-job").pid, signal.SIGKILL)
    record = wait_until(lambda: (r := api.describe("orphan-job")).is_final and r, timeout=60,
                   what="the job to be seen as orphaned")
    assert record.state is JobState.FAILED
    assert record.error.startswith("supervisor died (pid ")
    _assert_all_gone(home, "orphan-job")


def test_cmle_dialect_job_dir_and_a_failing_task(home, tmp_path, capsys, no_orphans):
    out_dir = tmp_path / "out"
    assert main(["jobs", "submit", "training", "probe-job", "--module-name", "trainer.probe",
                 "--package-path", TRAINER, "--config", _write_config(
                     tmp_path, scaleTier="CUSTOM", masterType="standard", workerType="standard", workerCount=1,
                     parameterServerType="standard", parameterServerCount=1),
                 "--job-dir", str(out_dir), "--stream-logs",
                 "--", "--fail-task", "master-0", "--exit-code", "3", "--seconds", "1"]) == 1
    out = capsys.readouterr()
    assert "[master-0] probe master-0 started" in out.out and "[ps-0] probe ps-0 says hello on stderr" in out.out
    assert "Job [probe-job] ended FAILED" in out.err
    seen = json.loads((out_dir / "worker-0.json").read_text())
    cfg = seen["tf_config"]
    assert set(cfg["cluster"]) == {"master", "worker", "ps"} and cfg["task"] == {"type": "worker", "index": 0}
    assert all(a.startswith("127.0.0.1:") for addrs in cfg["cluster"].values() for a in addrs)
    assert cfg["environment"] == "cloud" and cfg["job"]["workerCount"] == 1
    assert seen["argv"][-2:] == ["--job-dir", str(out_dir)]
    record = api.describe("probe-job")
    assert record.state is JobState.FAILED and record.exit_code == 3
    assert "the chief (master-0) exited with code 3" in record.error
    assert "probe master-0 exits with 3" in record.error  # the log tail travels with the error
    assert "chief-0" not in record.error and {t.name: t.state for t in record.tasks}["master-0"] == "FAILED"
    logs = home / "jobs" / "probe-job" / "logs"
    assert sorted(p.name for p in logs.glob("*-0.log")) == ["master-0.log", "ps-0.log", "worker-0.log"]
    assert seen["cwd"] == str(FIXTURES)  # the trainer runs in the package's parent, as under gcloud
    _assert_all_gone(home, "probe-job")


def test_local_train_distributed_runs_in_the_foreground(home, tmp_path, capfd, no_orphans):
    code = main(["local", "train", "--module-name", "trainer.probe", "--package-path", TRAINER,
                 "--distributed", "--worker-count", "1", "--parameter-server-count", "1",
                 "--evaluator-count", "1", "--use-chief-in-tf-config", "--job-dir", "out", "--", "--seconds", "0"])
    assert code == 0
    out = capfd.readouterr().out
    assert "[evaluator-0] probe evaluator-0 started" in out and "[chief-0] probe chief-0 exits with 0" in out
    chief = json.loads((tmp_path / "out" / "chief-0.json").read_text())["tf_config"]
    assert set(chief["cluster"]) == {"chief", "worker", "ps", "evaluator"} and chief["task"]["type"] == "chief"
    assert chief["job"]["useChiefInTfConfig"] is True and chief["environment"] == "cloud"
    assert not home.exists()  # local train records nothing
