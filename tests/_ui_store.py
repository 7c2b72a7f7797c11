"""Job stores for the dashboard's tests, built with the store's own API (and raw SQL only where a test
needs what the API refuses: a row a hostile or broken writer left)."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from toolkit.jobs import JobState, JobStore
from toolkit.jobs.tuning import sort_trials

HOSTILE = "<script>window.__pwned = 'name'</script><img src=x onerror=\"window.__pwned = 'img'\">"
PARAMS = ("learning_rate", "units", "optimizer")
OPTIMIZERS = ("adam", "<b onmouseover=alert(1)>sgd</b>")


def _curve(n: int, steps: int) -> list[dict[str, Any]]:
    return [{"trainingStep": 10 * s, "objectiveValue": round(n / 40 + 0.1 * s, 4)} for s in range(1, steps + 1)]


def make_study(store: JobStore, name: str = "study-1", *, trials: int = 20, job_dir: str = "/nonexistent/study",
               stopped: tuple[int, ...] = (3, 7), failed: tuple[int, ...] = (5,), running: int | None = None) -> str:
    """A tuning job with ``trials`` trials as its supervisor would have recorded them: finished ones, some
    stopped early, some failed, and (``running``, default the last) one still running whose own record
    holds one more measurement than the study's summary (the study publishes at most once a second)."""
    running = trials if running is None else running
    spec = {"trainingInput": {"pythonModule": "trainer.task", "hyperparameters": {
        "goal": "MAXIMIZE", "hyperparameterMetricTag": "accuracy", "maxTrials": trials, "maxParallelTrials": 2,
        "params": [{"parameterName": "learning_rate", "type": "DOUBLE", "minValue": 1e-4, "maxValue": 0.1},
                   {"parameterName": "units", "type": "DISCRETE", "discreteValues": [16, 32, 64]},
                   {"parameterName": "optimizer", "type": "CATEGORICAL", "categoricalValues": list(OPTIMIZERS)}]}}}
    store.create(name, backend="local", spec=spec, details={"tuning": {"jobDir": job_dir}})
    store.transition(name, JobState.PREPARING)
    store.transition(name, JobState.RUNNING)
    docs = []
    for n in range(1, trials + 1):
        child = f"{name}-trial-{n}"
        steps = 2 if n in stopped else 5
        curve = _curve(n, steps)
        last = {"trainingStep": curve[-1]["trainingStep"], "objectiveValue": curve[-1]["objectiveValue"]}
        store.create(child, backend="local", spec={"trainingInput": {"pythonModule": "trainer.task"}}, parent_job=name,
                     details={"trial": {"parentJob": name, "trialId": str(n), "outputDir": f"{job_dir}/{n}"},
                              "measurements": curve})
        store.transition(child, JobState.PREPARING)
        store.transition(child, JobState.RUNNING)
        doc: dict[str, Any] = {"trialId": str(n), "job": child, "state": "SUCCEEDED", "isTrialStoppedEarly": False,
                               "hyperparameters": {"learning_rate": round(0.001 * n, 4), "units": (16, 32, 64)[n % 3],
                                                   "optimizer": OPTIMIZERS[n % 2]},
                               "allMetrics": curve, "durationSeconds": 1.5 * n}
        if n == running:
            doc.update(state="RUNNING", allMetrics=curve[:-1])
            docs.append(doc)
            continue
        if n in failed:
            doc.update(state="FAILED", error="the trainer exited with 1")
            store.transition(child, JobState.FAILED, error="task master-0 exited with 1", exit_code=1)
        elif n in stopped:
            doc.update(isTrialStoppedEarly=True, stoppedAtStep=last["trainingStep"], finalMetric=last)
            store.transition(child, JobState.CANCELLING)
            store.transition(child, JobState.CANCELLED, message="stopped early")
        else:
            doc["finalMetric"] = last
            store.transition(child, JobState.SUCCEEDED, exit_code=0)
        docs.append(doc)
    publish(store, name, docs)
    return name


def publish(store: JobStore, name: str, docs: list[dict[str, Any]]) -> None:
    """The study's ``trainingOutput``, as ``_summary.summarize`` shapes it."""
    trials = sort_trials(docs, goal="MAXIMIZE")
    store.update_details(name, trainingOutput={
        "isHyperparameterTuningJob": True, "hyperparameterMetricTag": "accuracy", "goal": "MAXIMIZE",
        "completedTrialCount": sum(t["state"] == "SUCCEEDED" for t in trials),
        "failedTrialCount": sum(t["state"] == "FAILED" for t in trials),
        "stoppedEarlyTrialCount": sum(t["isTrialStoppedEarly"] for t in trials),
        "runningTrialCount": sum(t["state"] == "RUNNING" for t in trials),
        "bestTrial": next((t for t in trials if "finalMetric" in t), None), "trials": trials})


def add_raw_job(store: JobStore, name: str, *, state: str = "SUCCEEDED", backend: str = "local",
                error: str | None = None) -> None:
    """A job row written past the store's checks (the API refuses such a name): what a broken or hostile
    writer could leave in the database."""
    now = time.time()
    with sqlite3.connect(store.path) as conn:
        conn.execute("INSERT INTO jobs (name, backend, state, spec, job_dir, created_at, updated_at, error) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (name, backend, state, json.dumps({"labels": {"x": name}}), None, now, now, error))
        conn.execute("INSERT INTO tasks (job, name, state, updated_at) VALUES (?, ?, ?, ?)",
                     (name, name, "RUNNING", now))


def clone_jobs(store: JobStore, template: str, count: int) -> None:
    """``count`` copies of job ``template`` (and its tasks), in one transaction: a big store in a second."""
    with sqlite3.connect(store.path) as conn:
        for i in range(count):
            name = f"{template}-copy-{i}"
            conn.execute("INSERT INTO jobs (name, backend, state, spec, job_dir, created_at, updated_at, started_at, "
                         "ended_at, error, exit_code, warnings, details) SELECT ?, backend, state, spec, job_dir, "
                         "created_at - ?, updated_at, started_at, ended_at, error, exit_code, warnings, details "
                         "FROM jobs WHERE name = ?", (name, i + 1, template))
            conn.execute("INSERT INTO tasks (job, name, state, restarts, exit_code, updated_at) SELECT ?, name, state, "
                         "restarts, exit_code, updated_at FROM tasks WHERE job = ?", (name, template))


def delete_job(store: JobStore, name: str) -> None:
    """Removes a job's rows, as a user cleaning up the database by hand would."""
    with sqlite3.connect(store.path) as conn:
        for table in ("tasks", "history"):
            conn.execute(f"DELETE FROM {table} WHERE job = ?", (name,))
        conn.execute("DELETE FROM jobs WHERE name = ?", (name,))


def write_log(store: JobStore, job: str, task: str, text: str | bytes) -> Path:
    logs = store.job_dir(job) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{task}.log"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path
