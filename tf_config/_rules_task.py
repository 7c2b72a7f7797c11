"""Rules about ``task`` and how it fits the cluster (Estimator's RunConfig rules, stricter)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import Problem
from ._rules_cluster import TASK_TYPES
from ._suggest import did_you_mean, show

TASK_KEYS = ("type", "index", "trial", "cloud")


def check_task(data: dict, clean: dict[str, list[str]]) -> list[Problem]:
    """Check ``data["task"]`` against the usable part of the cluster."""
    has_cluster = isinstance(data.get("cluster"), Mapping) and bool(data["cluster"])
    if "task" not in data:
        if not has_cluster:
            return []
        return [Problem(
            "error", "task",
            "TF_CONFIG has a `cluster` but no `task`, so this process cannot tell which "
            'task it is. Add e.g. "task": {"type": "worker", "index": 0}.',
        )]
    task = data["task"]
    if not isinstance(task, Mapping):
        return [Problem(
            "error", "task",
            f"TF_CONFIG `task` must be an object like {{\"type\": \"worker\", \"index\": 0}}; "
            f"received {type(task).__name__} {show(task)}. Write it as an object.",
        )]
    problems = _unknown_task_keys(task) + _check_extras(task)
    type_ok, type_problems = _check_type(task, clean, has_cluster)
    problems += type_problems
    problems += _check_index(task, clean if type_ok else {}, has_cluster)
    if not any(p.is_error for p in problems) and not has_cluster and (task["type"], task["index"]) != ("worker", 0):
        problems.append(Problem(
            "error", "task",
            f"TF_CONFIG has no `cluster`, so the task must be worker:0; received "
            f"{task['type']}:{task['index']}. Add a cluster, or remove `task` for a one-process run.",
        ))
    if task.get("type") == "evaluator" and "master" in clean and "evaluator" not in clean:
        problems.append(Problem(
            "error", "task.type",
            "TF_CONFIG `task.type` is 'evaluator' but the cluster has a `master`; the master "
            "(TF1/CMLE) layout cannot run an evaluator. Rename `master` to `chief` "
            "(CMLE: useChiefInTfConfig) or run without an evaluator.",
        ))
    return problems


def _unknown_task_keys(task: Mapping) -> list[Problem]:
    return [
        Problem(
            "warning", f"task.{key}",
            f"TF_CONFIG `task` has the unknown key {show(key)}, which is ignored; known keys are "
            f"{', '.join(TASK_KEYS)}.{did_you_mean(key, TASK_KEYS)}",
        )
        for key in task if key not in TASK_KEYS
    ]


def _check_extras(task: Mapping) -> list[Problem]:
    return [
        Problem(
            "error", f"task.{key}",
            f"TF_CONFIG `task.{key}` is {type(task[key]).__name__} {show(task[key])}; expected a "
            f"string (CMLE writes e.g. \"{key}\": \"1\"). Quote the value.",
        )
        for key in ("trial", "cloud") if key in task and not isinstance(task[key], str)
    ]


def _check_type(task: Mapping, clean: dict, has_cluster: bool) -> tuple[bool, list[Problem]]:
    """Returns (whether the type names a job whose addresses are known, problems)."""
    if "type" not in task or task["type"] in ("", None):
        received = "missing" if "type" not in task else f"{show(task['type'])}"
        return False, [Problem(
            "error", "task.type",
            f"TF_CONFIG `task.type` is {received}; expected one of {', '.join(TASK_TYPES)}. "
            'Set it, e.g. "type": "worker".',
        )]
    task_type = task["type"]
    if not isinstance(task_type, str) or task_type not in TASK_TYPES:
        return False, [Problem(
            "error", "task.type",
            f"TF_CONFIG `task.type` is {show(task_type)}; valid types are "
            f"{', '.join(TASK_TYPES)}.{did_you_mean(task_type, TASK_TYPES)} Fix the type.",
        )]
    if not has_cluster or task_type in clean:
        return task_type in clean, []
    if task_type == "evaluator":  # CMLE never lists the evaluator; Estimator allowed that.
        return False, []
    jobs = ", ".join(clean) or "none usable"
    return False, [Problem(
        "error", "task.type",
        f"TF_CONFIG `task.type` is {task_type!r} but `cluster` has no {task_type!r} job "
        f"(jobs: {jobs}). Fix the type or add `cluster.{task_type}`.{did_you_mean(task_type, clean)}",
    )]


def _check_index(task: Mapping, clean: dict, has_cluster: bool) -> list[Problem]:
    if "index" not in task or task["index"] is None:
        return [Problem(
            "error", "task.index",
            "TF_CONFIG `task.index` is missing; expected an integer >= 0. "
            'Set it, e.g. "index": 0.',
        )]
    index: Any = task["index"]
    if isinstance(index, bool) or not isinstance(index, int):
        hint = ""
        if isinstance(index, str) and index.strip().lstrip("-").isdigit():
            hint = f" Write it without quotes: \"index\": {int(index)}."
        elif isinstance(index, float) and index.is_integer():
            hint = f" Write it as a whole number: \"index\": {int(index)}."
        return [Problem(
            "error", "task.index",
            f"TF_CONFIG `task.index` is {type(index).__name__} {show(index)}; expected an "
            f"integer >= 0.{hint or ' Use the task number, e.g. 0.'}",
        )]
    if index < 0:
        return [Problem(
            "error", "task.index",
            f"TF_CONFIG `task.index` is {index}; expected an integer >= 0. Use the task's "
            "position in its job's address list.",
        )]
    task_type = task.get("type")
    if task_type == "evaluator" and index > 0:
        return [Problem(
            "error", "task.index",
            f"TF_CONFIG `task.index` is {index} for the evaluator; there is only one evaluator, "
            "so its index must be 0. Set \"index\": 0.",
        )]
    if isinstance(task_type, str) and task_type in clean and index >= len(clean[task_type]):
        count = len(clean[task_type])
        return [Problem(
            "error", "task.index",
            f"TF_CONFIG `task.index` is {index} but `cluster.{task_type}` has {count} "
            f"address{'es' if count != 1 else ''} (valid: {_valid_range(count)}). "
            "Fix the index or add an address.",
        )]
    return []


def _valid_range(count: int) -> str:
    return "0" if count == 1 else f"0..{count - 1}"
