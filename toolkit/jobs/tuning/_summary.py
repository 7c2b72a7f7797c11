"""A study as CMLE reports it: ``trainingOutput`` with every trial, best first.

The summary is rebuilt from the Optuna study (the source of truth) and each
trial job's record (its times) whenever a trial starts or ends, and stored in
the tuning job's ``details``, so ``describe`` needs neither Optuna nor the
study to answer.
"""
from __future__ import annotations

import datetime as _dt
import math
import threading
from pathlib import Path
from typing import Any

import optuna

from toolkit.jobs.errors import JobNotFoundError
from toolkit.jobs.model.hyperparams import HyperparameterSpec
from toolkit.jobs.storage.records import iso_time
from toolkit.jobs.storage.store import JobStore

__all__ = ["StudyLog", "summarize", "sort_trials"]


class StudyLog:
    """``logs/study.log`` of the tuning job: what ``stream-logs JOB`` shows as ``[study]``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, line: str) -> None:
        stamp = _dt.datetime.now(tz=_dt.timezone.utc).strftime("%H:%M:%S")
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {line}\n")


def _times(store: JobStore, job: str | None) -> dict[str, Any]:
    if not job:
        return {}
    try:
        record = store.get(job)
    except JobNotFoundError:  # a resumed trial whose job record was removed with its home
        return {}
    end = record.ended_at
    duration = None if record.started_at is None else round((end or _now()) - record.started_at, 3)
    return {"startTime": iso_time(record.started_at), "endTime": iso_time(end), "durationSeconds": duration,
            "startedAt": record.started_at, "endedAt": end}


def _now() -> float:
    return _dt.datetime.now(tz=_dt.timezone.utc).timestamp()


def _trial_doc(store: JobStore, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    attrs = trial.user_attrs
    finished = {"COMPLETE": "SUCCEEDED", "PRUNED": "SUCCEEDED"}.get(trial.state.name, trial.state.name)
    doc: dict[str, Any] = {
        "trialId": str(attrs.get("trialId", trial.number + 1)), "job": attrs.get("job"),
        "state": attrs.get("state", finished),
        "hyperparameters": attrs.get("values", dict(trial.params)),
        "isTrialStoppedEarly": bool(attrs.get("isTrialStoppedEarly", trial.state.name == "PRUNED")),
        "allMetrics": [{"trainingStep": step, "objectiveValue": None if math.isnan(value) else value}
                       for step, value in sorted(trial.intermediate_values.items())],
    }
    value = attrs.get("objective", trial.value)
    if value is not None:
        doc["finalMetric"] = {"trainingStep": attrs.get("step"), "objectiveValue": value}
    for key in ("stoppedAtStep", "error", "warning", "resumedFrom"):
        if attrs.get(key) is not None and attrs.get(key) != "":
            doc[key] = attrs[key]
    return {**doc, **_times(store, attrs.get("job") if not attrs.get("resumedFrom") else None)}


def sort_trials(trials: list[dict[str, Any]], *, goal: str) -> list[dict[str, Any]]:
    """Trials with an objective first, best first for ``goal``; the rest by trial id."""
    sign = -1.0 if goal == "MAXIMIZE" else 1.0

    def key(doc: dict[str, Any]) -> tuple[int, float, int]:
        metric = doc.get("finalMetric")
        value = metric["objectiveValue"] if metric else math.nan
        has = metric is not None and not math.isnan(value)
        return (0 if has else 1, sign * value if has else 0.0, int(doc["trialId"]))

    return sorted(trials, key=key)


def summarize(store: JobStore, study: optuna.Study, hp: HyperparameterSpec) -> dict[str, Any]:
    """``trainingOutput`` for the tuning job, with ``bestTrial`` (None until a trial has an objective)."""
    trials = sort_trials([_trial_doc(store, t) for t in study.get_trials(deepcopy=False)], goal=hp.goal)
    own = [t for t in trials if "resumedFrom" not in t]
    best = next((t for t in trials if "finalMetric" in t), None)
    return {
        "isHyperparameterTuningJob": True, "hyperparameterMetricTag": hp.hyperparameter_metric_tag,
        "goal": hp.goal, "metricValue": hp.metric_value, "measurementSelectionType": hp.measurement_selection,
        "enableTrialEarlyStopping": hp.enable_trial_early_stopping,
        "completedTrialCount": sum(t["state"] == "SUCCEEDED" for t in own),
        "failedTrialCount": sum(t["state"] == "FAILED" for t in own),
        "stoppedEarlyTrialCount": sum(t["isTrialStoppedEarly"] for t in own),
        "runningTrialCount": sum(t["state"] == "RUNNING" for t in own),
        "bestTrial": best, "trials": trials,
    }
