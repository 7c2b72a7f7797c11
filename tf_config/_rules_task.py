"""Rules about ``task`` and how it fits the cluster (Estimator's RunConfig rules).

What TensorFlow reads and then works with (a string index it casts with
``int``, a custom job name) is a warning; ``strict`` makes it an error.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._errors import Problem
from ._rules_cluster import TASK_TYPES, risky
from ._suggest import did_you_mean, show

TASK_KEYS = ("type", "index", "trial", "cloud")
# What int() reads as a whole number: ASCII or other decimal digits (not "²"), at most 18 of them
# (a larger index cannot name a task, and int() of 5,000 digits raises).
_INDEX_TEXT = re.compile(r"\s*-?\d{1,18}\s*")


def index_value(index: Any) -> int | None:
    """The task index as TensorFlow reads it (``int(index)``), or None when ``int`` would fail or lie."""
    if isinstance(index, bool):
        return None
    if isinstance(index, int):
        return index
    if isinstance(index, float) and index.is_integer():
        return int(index)
    if isinstance(index, str) and _INDEX_TEXT.fullmatch(index):
        return int(index)
    return None


def single_task(cluster: Any) -> tuple[str, int] | None:
    """The only task of a one-task cluster, which TensorFlow lets TF_CONFIG leave out."""
    if not isinstance(cluster, Mapping):
        return None
    tasks = [(job, i) for job, addresses in cluster.items() if isinstance(addresses, (list, tuple))
             for i in range(len(addresses))]
    return tasks[0] if len(tasks) == 1 and len(cluster) == 1 else None


def check_task(data: dict, clean: dict[str, list[str]], *, strict: bool = False) -> list[Problem]:
    """Check ``data["task"]`` against the usable part of the cluster."""
    has_cluster = isinstance(data.get("cluster"), Mapping) and bool(data["cluster"])
    if "task" not in data:
        if not has_cluster or (single_task(data["cluster"]) and not strict):
            return []
        count = sum(len(a) for a in clean.values())
        return [Problem(
            "error", "task",
            f"TF_CONFIG has a `cluster` of {count} tasks but no `task`, so this process cannot tell "
            'which task it is. Add e.g. "task": {"type": "worker", "index": 0}.',
        )]
    task = data["task"]
    if not isinstance(task, Mapping):
        return [Problem(
            "error", "task",
            f"TF_CONFIG `task` must be an object like {{\"type\": \"worker\", \"index\": 0}}; "
            f"received {type(task).__name__} {show(task)}. Write it as an object.",
        )]
    problems = _unknown_task_keys(task) + _check_extras(task, strict)
    type_ok, type_problems = _check_type(task, clean, has_cluster)
    problems += type_problems
    problems += _check_index(task, clean if type_ok else {}, strict)
    if not any(p.is_error for p in problems) and not has_cluster \
            and (task["type"], index_value(task["index"])) != ("worker", 0):
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


def _check_extras(task: Mapping, strict: bool) -> list[Problem]:
    return [
        Problem(
            risky(strict), f"task.{key}",
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
    if not isinstance(task_type, str) or (task_type not in TASK_TYPES and task_type not in clean):
        return False, [Problem(
            "error", "task.type",
            f"TF_CONFIG `task.type` is {show(task_type)}; valid types are "
            f"{', '.join(TASK_TYPES)} or a custom job of `cluster`.{did_you_mean(task_type, TASK_TYPES)} "
            "Fix the type.",
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


def _check_index(task: Mapping, clean: dict, strict: bool) -> list[Problem]:
    if "index" not in task or task["index"] is None:
        return [Problem(
            "error", "task.index",
            "TF_CONFIG `task.index` is missing; expected an integer >= 0. "
            'Set it, e.g. "index": 0.',
        )]
    received: Any = task["index"]
    index = index_value(received)
    if index is None:
        return [Problem(
            "error", "task.index",
            f"TF_CONFIG `task.index` is {type(received).__name__} {show(received)}; expected an "
            "integer >= 0. Use the task number, e.g. 0.",
        )]
    problems = []
    if not isinstance(received, int):
        how = "without quotes" if isinstance(received, str) else "as a whole number"
        problems.append(Problem(
            risky(strict), "task.index",
            f"TF_CONFIG `task.index` is {type(received).__name__} {show(received)}; TensorFlow reads "
            f"it as {index}, but expected an integer >= 0. Write it {how}: \"index\": {index}.",
        ))
    return problems + _check_index_range(task.get("type"), index, clean)


def _check_index_range(task_type: Any, index: int, clean: dict) -> list[Problem]:
    if index < 0:
        return [Problem(
            "error", "task.index",
            f"TF_CONFIG `task.index` is {index}; expected an integer >= 0. Use the task's "
            "position in its job's address list.",
        )]
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
