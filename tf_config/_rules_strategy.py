"""Which strategy fits a cluster, and the rules a chosen strategy adds.

Both work on plain data (job name -> address list), so they can run on a
partly broken document and inside the model alike.
"""
from __future__ import annotations

from collections.abc import Callable

from ._errors import Problem

STRATEGIES = ("parameter_server", "multi_worker_mirrored", "mirrored", "one_device", "default", "auto")
_ONE_PROCESS = ("mirrored", "one_device", "default")
_STRATEGY_JOBS = ("chief", "worker", "ps", "evaluator")


def _plural(n: int, word: str) -> str:
    return f"{n} {word} task{'s' if n != 1 else ''}"


def _counts(cluster: dict) -> tuple[int, int]:
    """(training workers including chief/master, ps)."""
    workers = sum(len(cluster.get(job, ())) for job in ("chief", "master", "worker"))
    return workers, len(cluster.get("ps", ()))


def auto_strategy(cluster: dict, *, num_local_gpus: int = 0) -> tuple[str, str]:
    """The strategy ``auto`` picks for this cluster, and the reason in words."""
    workers, ps = _counts(cluster)
    if ps:
        reason = f"the cluster has {_plural(ps, 'ps')} and {_plural(workers, 'worker')} (chief included)"
        if not cluster.get("chief") and not cluster.get("master"):
            reason += (", but no chief: TF1's between-graph layout, which TF1 graph scripts run; "
                       "TF2's ParameterServerStrategy would need a chief")
        return "parameter_server", reason
    if workers > 1:
        return "multi_worker_mirrored", (
            f"the cluster has {_plural(workers, 'worker')} (chief included) and no ps task"
        )
    where = "there is no cluster" if not cluster else "the cluster has a single worker task and no ps"
    if num_local_gpus > 1:
        return "mirrored", f"{where} and this machine has {num_local_gpus} GPUs"
    gpus = "no GPU" if num_local_gpus <= 0 else "one GPU"
    return "default", f"{where} and this machine has {gpus}, so nothing needs distributing"


def check_strategy(strategy: object, cluster: dict, task_type: object) -> list[Problem]:
    """Rules a strategy adds on top of the structural ones."""
    if strategy not in STRATEGIES:
        return [Problem(
            "error", "strategy",
            f"strategy is {strategy!r}; valid strategies are {', '.join(STRATEGIES)}. Pick one of them.",
        )]
    if strategy == "auto":
        strategy = auto_strategy(cluster)[0]
    return _RULES[strategy](str(strategy), cluster, task_type)


def _check_ps(name: str, cluster: dict, task_type: object) -> list[Problem]:
    if not cluster:
        return [_err(
            "parameter_server needs a cluster with ps, worker and chief tasks; TF_CONFIG has none. "
            "Generate one with `tf_config.generate(chief=1, workers=2, ps=1)`."
        )]
    problems = _no_master(name, cluster)
    if not cluster.get("ps"):
        problems.append(_err(
            "parameter_server needs at least one `ps` task; the cluster has none. "
            "Generate it with `tf_config.generate(ps=1)`, or use multi_worker_mirrored.", "cluster.ps",
        ))
    if not cluster.get("worker"):
        problems.append(_err(
            "parameter_server needs at least one `worker` task to run steps; the cluster has none. "
            "Generate it with `tf_config.generate(workers=1)` (or more workers).", "cluster.worker",
        ))
    if not cluster.get("chief") and not cluster.get("master"):
        layout = ("TF1's between-graph layout (ps and workers, worker 0 the chief)"
                  if cluster.get("ps") and cluster.get("worker") else "no `chief` task")
        problems.append(_err(
            f"parameter_server (TF2's ParameterServerStrategy) needs a `chief` task: it is the coordinator "
            f"that schedules steps; the cluster has {layout}, which only TF1 graph scripts "
            "(`replica_device_setter`, `MonitoredTrainingSession`) can run. Add a chief: "
            "`tf_config.generate(chief=1)` (launcher: chief=1).", "cluster.chief",
        ))
    return problems


def _check_mwms(name: str, cluster: dict, task_type: object) -> list[Problem]:
    problems = _no_master(name, cluster)
    ps = len(cluster.get("ps", ()))
    if ps:
        problems.append(_err(
            f"multi_worker_mirrored must have no `ps` task; the cluster has {ps}. "
            "Generate it with `tf_config.generate(ps=0)`, or use parameter_server.", "cluster.ps",
        ))
    return problems


def _check_one_process(name: str, cluster: dict, task_type: object) -> list[Problem]:
    problems = []
    workers, ps = _counts(cluster)
    has_evaluator = "evaluator" in cluster or task_type == "evaluator"
    if has_evaluator and workers + ps > 1:
        problems.append(_err(
            f"{name} trains in one process, so an evaluator beside this {workers + ps}-task cluster "
            "would wait for tasks that never train. Use parameter_server or multi_worker_mirrored, "
            "keep a single training task (`tf_config.generate(workers=1, chief=0, ps=0)`), or drop the evaluator "
            "(`tf_config.generate(evaluator=0)`).", "task.type" if task_type == "evaluator" else "cluster.evaluator",
        ))
    if workers + ps > 1:
        problems.append(Problem(
            "warning", "cluster",
            f"{name} runs in one process and ignores the cluster's other "
            f"{workers + ps - 1} task(s). Use multi_worker_mirrored or parameter_server, or "
            "remove `cluster`.",
        ))
    return problems


def _no_master(name: str, cluster: dict) -> list[Problem]:
    problems = [
        _err(f"{name} refuses the custom job {job!r}: TensorFlow's multi-worker strategies only accept "
             "chief, worker, ps and evaluator. Rename the job, or use a one-process strategy.", f"cluster.{job}")
        for job in cluster if job not in (*_STRATEGY_JOBS, "master")
    ]
    if "master" not in cluster:
        return problems
    return problems + [_err(
        f"{name} does not accept a `master` job (the TF1/CMLE name); TF2 strategies expect "
        "`chief`. Rename it (CMLE: set useChiefInTfConfig; launcher: dialect='tf'), or generate with "
        "`tf_config.generate(dialect='tf2')`.",
        "cluster.master",
    )]


def _err(message: str, field: str = "cluster") -> Problem:
    return Problem("error", field, message)


_RULES: dict[str, Callable[[str, dict, object], list[Problem]]] = {
    "parameter_server": _check_ps,
    "multi_worker_mirrored": _check_mwms,
    **{name: _check_one_process for name in _ONE_PROCESS},
}
