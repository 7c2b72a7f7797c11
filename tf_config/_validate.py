"""The validator: every rule, all problems at once, never an exception for bad input."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import Problem
from ._parse import parse_document
from ._rules_cluster import check_cluster
from ._rules_strategy import STRATEGIES, check_strategy
from ._rules_task import check_task
from ._suggest import did_you_mean, show

# Every top-level key TensorFlow (cluster resolver, RunConfig, CMLE) reads.
TOP_LEVEL_KEYS = ("cluster", "task", "rpc_layer", "environment", "job", "session_master",
                  "eval_session_master", "model_dir", "service")
_STRING_KEYS = ("rpc_layer", "environment", "session_master", "eval_session_master", "model_dir")
_OBJECT_KEYS = ("job", "service")


def validate(doc: Any, *, strategy: str | None = None, strict: bool = False) -> list[Problem]:
    """Check a TF_CONFIG and return every problem, errors and warnings.

    Unlike TensorFlow's TFConfigClusterResolver, which accepts anything and
    fails later (or never), this rejects up front what would fail and says how
    to fix it. What TensorFlow accepts and runs (a string index, a custom job
    name, a one-task cluster without ``task``) is a warning at most.

    Args:
        doc: JSON text, a mapping, or a ``TFConfig``.
        strategy: also apply the rules of this strategy (``parameter_server``,
            ``multi_worker_mirrored``, ``mirrored``, ``one_device``, ``default``
            or ``auto``).
        strict: report the risky forms TensorFlow accepts (string or float
            index, custom job names, port 0, duplicate JSON keys, loopback next
            to other hosts, a one-task cluster without ``task``) as errors.

    Returns:
        Problems in document order; empty when the TF_CONFIG is fine.

    Example:
        >>> for problem in validate({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}):
        ...     print(problem)  # doctest: +NORMALIZE_WHITESPACE
        error: task.index: TF_CONFIG `task.index` is 1 but `cluster.worker` has 1 address (valid: 0).
        Fix the index or add an address.
    """
    data, problems = parse_document(doc, strict=strict)
    if data is None:
        if strategy is not None and strategy not in STRATEGIES:
            problems += check_strategy(strategy, {}, None)
        return problems
    problems += _check_top_level(data)
    cluster_problems, clean = check_cluster(data, strict=strict)
    problems += cluster_problems
    problems += check_task(data, clean, strict=strict)
    if strategy is not None:
        task = data.get("task")
        task_type = task.get("type") if isinstance(task, Mapping) else None
        problems += check_strategy(strategy, clean, task_type)
    return problems


def _check_top_level(data: dict) -> list[Problem]:
    problems = []
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            problems.append(Problem(
                "warning", key if isinstance(key, str) and key.strip() else repr(key),
                f"TF_CONFIG has the unknown top-level key {show(key)}, which is ignored; known keys "
                f"are {', '.join(TOP_LEVEL_KEYS)}.{did_you_mean(key, TOP_LEVEL_KEYS)}",
            ))
    for key in _STRING_KEYS:
        if key in data and not (isinstance(data[key], str) and data[key]):
            example = ' such as "grpc"' if key == "rpc_layer" else ""
            problems.append(Problem(
                "error", key,
                f"TF_CONFIG `{key}` is {type(data[key]).__name__} {show(data[key])}; expected a "
                f"non-empty string{example}. Fix the value or remove the key.",
            ))
    for key in _OBJECT_KEYS:
        if key in data and not isinstance(data[key], Mapping):
            problems.append(Problem(
                "error", key,
                f"TF_CONFIG `{key}` is {type(data[key]).__name__} {show(data[key])}; expected an "
                "object. Fix the value or remove the key.",
            ))
    task = data.get("task")
    task_type = task.get("type") if isinstance(task, Mapping) else None
    cluster = data.get("cluster")
    has_cluster = isinstance(cluster, Mapping) and any(cluster.values())
    # TensorFlow's RunConfig reads it on a one-process run (no cluster) too
    if "eval_session_master" in data and task_type != "evaluator" and has_cluster:
        problems.append(Problem(
            "error", "eval_session_master",
            f"TF_CONFIG `eval_session_master` is set but `task.type` is {show(task_type)}; "
            "in a cluster, TensorFlow's RunConfig refuses it for any task but the evaluator. Remove it "
            "from this task's TF_CONFIG.",
        ))
    return problems
