"""`describe` names each place apart: the user's job dir, tfdist's record, the task logs, the tuning output.

And `list` / `describe` take gcloud's ``--filter``, ``--sort-by``, ``--limit``
and ``--format``. The records are written to a real store; no job runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from toolkit.cli import main
from toolkit.jobs import JobState, JobStore
from toolkit.jobs.views import format_record
from toolkit.launcher._task import armed_env


def _finished(store: JobStore, name: str, *, spec: dict, details: dict, state=JobState.SUCCEEDED) -> None:
    store.create(name, backend="local", spec=spec, details=details)
    for step in (JobState.PREPARING, JobState.RUNNING, state):
        assert store.advance(name, step)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    store = JobStore(tmp_path / "home")
    out = tmp_path / "runs" / "census"
    _finished(store, "census", spec={"jobId": "census", "labels": {"team": "ml"},
                                     "trainingInput": {"jobDir": "runs/census", "scaleTier": "CUSTOM"}},
              details={"plan": {"args": ["--steps", "5", "--job-dir", str(out)]}, "tasks": ["master-0", "ps-0"]})
    store.update_task("census", "master-0", state="SUCCEEDED", exit_code=0,
                      log_path=str(tmp_path / "home" / "jobs" / "census" / "logs" / "master-0.log"))
    _finished(store, "sweep", spec={"jobId": "sweep", "labels": {"team": "vision"},
                                    "trainingInput": {"jobDir": "runs/sweep", "hyperparameters": {}}},
              details={"tuning": {"jobDir": str(tmp_path / "runs" / "sweep")}, "tasks": ["study"]},
              state=JobState.FAILED)
    return store


def test_describe_names_the_job_dir_the_record_the_logs_and_the_tuning_output_apart(store, tmp_path, capsys):
    home = tmp_path / "home"
    text = format_record(store.get("census"))
    assert f"jobDir: {tmp_path / 'runs' / 'census'}  [the trainer's --job-dir" in text
    assert f"recordDir: {home / 'jobs' / 'census'}  [tfdist's record" in text
    assert f"  master-0: {home / 'jobs' / 'census' / 'logs' / 'master-0.log'}" in text
    assert f"  ps-0: {home / 'jobs' / 'census' / 'logs' / 'ps-0.log'}" in text  # not started yet: where it will be
    assert "tuningOutputDir" not in text
    assert main(["jobs", "describe", "census", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["jobDir"] == str(tmp_path / "runs" / "census")  # the user's, not tfdist's folder
    assert record["recordDir"] == str(home / "jobs" / "census")
    assert record["trainingInput"]["jobDir"] == "runs/census"  # as submitted
    assert set(record["logPaths"]) == {"master-0", "ps-0"}
    sweep = format_record(store.get("sweep"))
    assert f"tuningOutputDir: {tmp_path / 'runs' / 'sweep'}  [each trial n writes to <this>/n]" in sweep
    assert f"jobDir: {tmp_path / 'runs' / 'sweep'}" in sweep


def test_describe_without_a_job_dir_says_so():
    from toolkit.jobs.storage.records import JobRecord

    record = JobRecord(name="bare", backend="local", state="QUEUED", spec={"trainingInput": {}}, created_at=0.0,
                       job_dir="/records/bare")
    assert "jobDir: (none: the trainer got no --job-dir)" in format_record(record)
    assert record.to_dict()["jobDir"] is None and record.to_dict()["recordDir"] == "/records/bare"


def test_list_and_describe_take_gclouds_filter_sort_limit_and_format(store, capsys):
    assert main(["jobs", "list", "--filter", "state=SUCCEEDED", "--format", "value(jobId,state)"]) == 0
    assert capsys.readouterr().out.splitlines() == ["census\tSUCCEEDED"]
    assert main(["jobs", "list", "--filter", "labels.team:vis* OR jobId=census", "--sort-by", "jobId",
                 "--format", "value(jobId)"]) == 0
    assert capsys.readouterr().out.split() == ["census", "sweep"]
    assert main(["jobs", "list", "--filter", "NOT state=FAILED", "--format", "json"]) == 0
    assert [j["jobId"] for j in json.loads(capsys.readouterr().out)] == ["census"]
    assert main(["jobs", "list", "--sort-by", "~jobId", "--limit", "1", "--format", "value(jobId)"]) == 0
    assert capsys.readouterr().out.split() == ["sweep"]
    assert main(["jobs", "describe", "sweep", "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["state"] == "FAILED"
    assert main(["jobs", "describe", "census", "--format", "value(jobId,labels.team)"]) == 0
    assert capsys.readouterr().out.strip() == "census\tml"
    assert main(["jobs", "describe", "census", "--summarize"]) == 0
    assert "recordDir: " in capsys.readouterr().out
    assert main(["jobs", "list", "--uri", "--filter", "jobId=census"]) == 0
    assert capsys.readouterr().out.strip().startswith("file:///")
    assert main(["jobs", "describe", "census", "--format", "csv"]) == 2
    assert "--format: received 'csv'; expected json, yaml, value(KEY,...) or text" in capsys.readouterr().err
    assert main(["jobs", "list", "--filter", "state"]) == 2
    assert "--filter: cannot read the term 'state'" in capsys.readouterr().err


_MAKEDIRS = """
import os, pathlib, sys
job_dir, other = sys.argv[1], sys.argv[2]
os.makedirs(job_dir)                      # census' Keras variant: a bare makedirs in every task
pathlib.Path(job_dir).mkdir(parents=True)
os.makedirs(os.path.join(job_dir, "sub"))  # below it: created as usual
try:
    os.makedirs(other)
except FileExistsError:
    print("other dirs still refuse")
print("ok")
"""


def test_a_task_creating_the_existing_job_dir_again_succeeds_as_on_cmle(tmp_path):
    job_dir, other = tmp_path / "job", tmp_path / "other"
    job_dir.mkdir()
    other.mkdir()
    env = armed_env({**os.environ, "TFDIST_USER_JOB_DIR": str(job_dir)})
    proc = subprocess.run([sys.executable, "-c", _MAKEDIRS, str(job_dir), str(other)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["other dirs still refuse", "ok"] and (job_dir / "sub").is_dir()
    plain = subprocess.run([sys.executable, "-c", _MAKEDIRS, str(job_dir), str(other)], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "TFDIST_USER_JOB_DIR": str(job_dir)})
    assert plain.returncode == 1 and "FileExistsError" in plain.stderr  # outside a job, Python's own rules


TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "trainer"


@pytest.mark.parametrize(("module", "warned"), [("trainer.alone", True), ("trainer.probe", False)])
def test_a_cluster_whose_trainer_never_reads_tf_config_is_warned_about_once(tmp_path, monkeypatch, capsys, module,
                                                                           warned, no_orphans):
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    assert main(["jobs", "submit", "training", "alone", "--package-path", str(TRAINER), "--module-name", module,
                 "--scale-tier", "custom", "--master-machine-type", "standard", "--worker-count", "1",
                 "--worker-machine-type", "standard", "--job-dir", str(tmp_path / "out"), "--stream-logs"]) == 0
    streamed = capsys.readouterr().err
    said = "master-0, worker-0 never read TF_CONFIG, so trained under no distribution strategy"
    assert streamed.count(said) == (1 if warned else 0)
    assert main(["jobs", "describe", "alone"]) == 0
    assert capsys.readouterr().out.count(said) == (1 if warned else 0)
