"""Tuning jobs end to end with a trainer that needs no TensorFlow (about a second per trial).

Each test submits real jobs: a detached supervisor runs the Optuna study and
starts every trial's process through the launcher, so what is asserted (trial
jobs, TF_CONFIG, flags, objectives, failure and cancel rules, describe's
output) is what a user gets.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import optuna
import pytest
import yaml
from _polling import wait_until

from toolkit.cli import main
from toolkit.jobs import JobSpec, JobSpecError, JobState, JobStore, api
from toolkit.jobs.engines.local._procs import is_alive

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
TRAINER = str(FIXTURES / "trainer")


def _submit(name: str, *args: str, job_dir: str | None = None, **hyper) -> None:
    doc = yaml.safe_load((FIXTURES / "tune_probe.yaml").read_text())
    doc["trainingInput"]["hyperparameters"].update(hyper)
    overrides = {"packagePath": TRAINER, "args": list(args) or None, "jobDir": job_dir}
    spec = JobSpec.from_dict(doc, job_id=name, overrides={k: v for k, v in overrides.items() if v is not None})
    api.submit(spec)


def _finished(name: str, timeout: float = 90):
    return wait_until(lambda: (r := api.describe(name)).is_final and r, timeout=timeout, what=f"{name} to end")


def _pids(home: Path, job: str) -> list[int]:
    store = JobStore(home)
    return [store.supervisor(job).pid] + [pid for trial in store.children(job)
                                          for _, pid, _ in store.task_processes(trial)]


def test_trials_run_in_parallel_as_child_jobs_and_the_best_is_recorded(home, tmp_path, capsys, no_orphans):
    _submit("probe", "--seconds", "1.5", job_dir="study")
    record = _finished("probe")
    assert record.state is JobState.SUCCEEDED, record.error
    store = JobStore(home)
    trials = store.children("probe")
    assert trials == [f"probe-trial-{n}" for n in (1, 2, 3, 4)]
    output = record.details["trainingOutput"]
    assert output["completedTrialCount"] == 4 and output["failedTrialCount"] == 0
    job_dir = tmp_path / "study"  # the study's jobDir; each trial gets jobDir/<n>
    for doc in output["trials"]:
        n, values = doc["trialId"], doc["hyperparameters"]
        seen = json.loads((job_dir / n / "trial.json").read_text())
        assert seen["tf_config"]["task"] == {"type": "master", "index": 0, "trial": n}
        assert seen["argv"][-5:] == ["--job-dir", str(job_dir / n), f"--x={values['x']!r}", f"--y={values['y']}",
                                     f"--kind={values['kind']}"]
        assert seen["trial_dir"] == str(job_dir / n)
        expected = -(values["x"] - 0.3) ** 2 - values["y"] / 100  # the trainer's final (step 2) score
        assert doc["finalMetric"] == {"trainingStep": 2, "objectiveValue": pytest.approx(expected, rel=1e-5)}
        assert 0.01 <= values["x"] <= 1 and values["y"] in range(1, 6) and values["kind"] in ("plain", "fancy")
        assert store.get(doc["job"]).parent_job == "probe" and store.get(doc["job"]).state is JobState.SUCCEEDED
    objectives = [t["finalMetric"]["objectiveValue"] for t in output["trials"]]
    assert objectives == sorted(objectives, reverse=True)  # best first (MAXIMIZE)
    assert output["bestTrial"] == output["trials"][0]
    first, second = (store.get(f"probe-trial-{n}") for n in (1, 2))
    assert first.started_at < second.ended_at and second.started_at < first.ended_at  # they overlapped
    study = optuna.load_study(study_name="probe", storage=store.url)
    assert sorted(t.value for t in study.trials) == sorted(objectives)
    assert (job_dir / "trials.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    capsys.readouterr()
    assert main(["jobs", "describe", "probe", "--plot", str(tmp_path / "plot.png")]) == 0
    out = capsys.readouterr().out
    assert "trials: 4 succeeded, 0 failed, 0 running (MAXIMIZE 'score', final value)" in out
    best = output["bestTrial"]
    assert f"bestTrial: {best['trialId']} " in out and f"x={best['hyperparameters']['x']}" in out
    assert (tmp_path / "plot.png").stat().st_size > 1000
    assert main(["jobs", "stream-logs", "probe"]) == 0
    logs = capsys.readouterr().out
    assert "[study] " in logs and "trial 4 SUCCEEDED: score = " in logs
    assert main(["jobs", "describe", "probe-trial-1"]) == 0 and "parentJob: probe" in capsys.readouterr().out

    _submit("probe-more", maxTrials=1, resumePreviousJobId="probe")
    resumed = _finished("probe-more").details["trainingOutput"]
    assert len(resumed["trials"]) == 5 and sum(t.get("resumedFrom") == "probe" for t in resumed["trials"]) == 4
    assert resumed["completedTrialCount"] == 1
    pids = _pids(home, "probe") + _pids(home, "probe-more")
    wait_until(lambda: not any(is_alive(p) for p in pids), timeout=30, what="every process of both studies to exit")


def test_failed_trials_beyond_max_failed_trials_stop_the_job(home, capsys, no_orphans):
    _submit("always-fails", "--fail-above", "-1", maxTrials=6, maxParallelTrials=1, maxFailedTrials=1)
    _submit("wrong-tag", hyperparameterMetricTag="scroe", maxTrials=3, maxParallelTrials=1)
    failed, wrong = _finished("always-fails"), _finished("wrong-tag")
    assert failed.state is JobState.FAILED
    assert failed.error.startswith("2 trials failed, more than maxFailedTrials (1); the study stopped. trial 1: ")
    store = JobStore(home)
    assert store.children("always-fails") == ["always-fails-trial-1", "always-fails-trial-2"]
    for name in store.children("always-fails"):
        trial = store.get(name)
        assert trial.state is JobState.FAILED and trial.exit_code == 3
    assert failed.details["trainingOutput"]["failedTrialCount"] == 2
    assert wrong.state is JobState.FAILED and store.children("wrong-tag") == ["wrong-tag-trial-1"]
    doc = wrong.details["trainingOutput"]["trials"][0]
    assert store.get("wrong-tag-trial-1").state is JobState.SUCCEEDED  # the process was fine; the metric is missing
    assert doc["state"] == "FAILED" and "hyperparameterMetricTag 'scroe' names no scalar" in doc["error"]
    assert "(found: score)" in doc["error"]
    assert main(["jobs", "describe", "wrong-tag"]) == 0
    assert "names no scalar" in capsys.readouterr().out
    assert main(["jobs", "describe", "wrong-tag", "--plot", "p.png"]) == 1
    assert "no trial has an objective yet" in capsys.readouterr().err


def test_cancel_stops_one_trial_or_every_trial(home, no_orphans):
    _submit("slow", "--seconds", "120", maxTrials=4, maxParallelTrials=2)
    store = JobStore(home)

    def running(n: int) -> bool:
        return all(store.task_processes(t) for t in store.children("slow")) and len(store.children("slow")) == n

    wait_until(lambda: running(2), timeout=60, what="two trials with processes")
    trial_pid = store.task_processes("slow-trial-1")[0][1]
    assert api.cancel("slow-trial-1", timeout=30).state is JobState.CANCELLED  # one trial: the study goes on
    assert not is_alive(trial_pid)
    wait_until(lambda: running(3), timeout=60, what="trial 3 to take the freed slot")
    assert api.describe("slow").state is JobState.RUNNING
    pids = _pids(home, "slow")
    record = api.cancel("slow", timeout=60)
    assert record.state is JobState.CANCELLED
    assert [store.get(t).state for t in store.children("slow")] == [JobState.CANCELLED] * 3
    wait_until(lambda: not any(is_alive(p) for p in pids), timeout=30, what="every process of the study to exit")
    output = api.describe("slow").details["trainingOutput"]
    assert output["failedTrialCount"] == 0 and {t["state"] for t in output["trials"]} == {"CANCELLED"}
    study = optuna.load_study(study_name="slow", storage=store.url)
    assert all(t.state is optuna.trial.TrialState.FAIL for t in study.trials) and len(study.trials) == 3


def test_submit_refuses_a_study_that_cannot_run(home):
    with pytest.raises(JobSpecError, match="resumePreviousJobId: received 'ghost', which is not a tuning job"):
        _submit("orphan", resumePreviousJobId="ghost")
    assert JobStore(home).names() == []
    assert sqlite3.connect(JobStore(home).path).execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
