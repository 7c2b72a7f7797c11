"""Processes: ``initialize``, ``num_processes`` and ``process_id`` from TF_CONFIG or Keras' arguments.

The cluster of a multi-process distribution is a ``tf_config.TFConfig``.
It comes from TF_CONFIG (what ``tfdist launch``, TFJob or Slurm set), or,
without one, from ``keras.distribution.initialize(job_addresses,
num_processes, process_id)``: the addresses become ``cluster.worker`` and
the process id the task index. When both exist they must agree. A cluster
with parameter servers is one client's (``strategies.device_map.in_graph_session``
connects it to the other tasks, whose devices ``list_devices`` then lists).
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from tf_config import TFConfig
from toolkit.keras_distribution._errors import KerasDistributionError

__all__ = ["cluster", "initialize", "num_processes", "process_id", "reset", "training_tasks"]

_TRAINING_JOBS = ("chief", "worker")
_initialized: list[TFConfig] = []


def reset() -> None:
    """Forgets a cluster given to ``initialize`` (for tests and ``disable_keras_distribution``)."""
    _initialized.clear()


def training_tasks(config: TFConfig) -> list[tuple[str, int]]:
    """The tasks that train, in process-id order: the chief, then the workers."""
    spec = config.cluster
    return [(job, index) for job in _TRAINING_JOBS for index in range(len(spec.get(job, [])))]


def _addresses(config: TFConfig) -> list[str]:
    return [config.cluster[job][index] for job, index in training_tasks(config)]


def cluster(environ: Mapping[str, str] | None = None) -> TFConfig | None:
    """This process's multi-process cluster, or None when it runs alone."""
    if _initialized:
        return _initialized[-1]
    config = TFConfig.from_env(os.environ if environ is None else environ)
    if config.is_local or config.num_ps > 0 or len(training_tasks(config)) < 2:
        return None  # with ps tasks, one client places variables on them (in-graph): one process
    return config


def _own_id(config: TFConfig) -> int:
    tasks = training_tasks(config)
    return tasks.index((config.task_type, config.task_index)) if (config.task_type, config.task_index) in tasks else 0


def _check_agrees(config: TFConfig, addresses: list[str] | None, count: int | None, pid: int | None) -> None:
    known = _addresses(config)
    if addresses is not None and addresses != known:
        raise KerasDistributionError(
            f"`job_addresses` is {','.join(addresses)!r} but TF_CONFIG's cluster lists the training tasks "
            f"(chief, then workers) at {','.join(known)!r}. Pass the same addresses in the same order, or call "
            "keras.distribution.initialize() without arguments to use TF_CONFIG.", field="job_addresses")
    if count is not None and count != len(known):
        raise KerasDistributionError(
            f"`num_processes` is {count} but TF_CONFIG's cluster has {len(known)} training tasks "
            f"({', '.join(f'{j}:{i}' for j, i in training_tasks(config))}). Pass num_processes={len(known)} or "
            "fix TF_CONFIG.", field="num_processes")
    if pid is not None and pid != _own_id(config):
        raise KerasDistributionError(
            f"`process_id` is {pid} but TF_CONFIG says this task is {config.task_type}:{config.task_index}, "
            f"process {_own_id(config)} (the chief is 0, then the workers). Pass process_id={_own_id(config)} "
            "or fix TF_CONFIG's task.", field="process_id")


def initialize(job_addresses: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, environ: Mapping[str, str] | None = None) -> None:
    """Keras' ``initialize`` on TensorFlow: checks (or, without TF_CONFIG, sets) the cluster.

    Raises:
        KerasDistributionError: the arguments disagree with TF_CONFIG, or
            without TF_CONFIG they do not describe a cluster.
    """
    addresses = None if job_addresses is None else [a.strip() for a in str(job_addresses).split(",") if a.strip()]
    config = TFConfig.from_env(os.environ if environ is None else environ)
    if not config.is_local:
        _check_agrees(config, addresses, num_processes, process_id)
        _initialized.append(config)
        return
    if not addresses or len(addresses) < 2:
        raise KerasDistributionError(
            f"`job_addresses` is {job_addresses!r} and there is no TF_CONFIG, so the processes cannot find each "
            "other. Pass every process's host:port, e.g. initialize('10.0.0.1:2222,10.0.0.2:2222', 2, 0), or "
            "set TF_CONFIG (tfdist's launcher does).", field="job_addresses")
    if num_processes is not None and num_processes != len(addresses):
        raise KerasDistributionError(
            f"`num_processes` is {num_processes} but `job_addresses` lists {len(addresses)} addresses. "
            "Give one address per process.", field="num_processes")
    if process_id is None or not 0 <= process_id < len(addresses):
        raise KerasDistributionError(
            f"`process_id` is {process_id!r}; expected 0..{len(addresses) - 1} (this process's place in "
            "`job_addresses`).", field="process_id")
    _initialized.append(TFConfig.from_dict({"cluster": {"worker": addresses},
                                            "task": {"type": "worker", "index": process_id}}))


def num_processes() -> int:
    config = cluster()
    return 1 if config is None else len(training_tasks(config))


def process_id() -> int:
    config = cluster()
    return 0 if config is None else _own_id(config)
