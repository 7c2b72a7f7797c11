"""Which ``tf.distribute`` strategies the Estimator runs (``RunConfig(train_distribute=, eval_distribute=)``).

Pure Python (the class name decides, through the strategy's class hierarchy),
so ``RunConfig`` still never imports TensorFlow. The kinds are:

* ``in_graph``: one machine's replicas in this process (``MirroredStrategy`` on
  several GPUs or logical CPUs, ``CentralStorageStrategy``, ``OneDeviceStrategy``,
  and the v1 ``ParameterServerStrategy`` with no cluster, which TF ran as central storage);
* ``collective``: ``MultiWorkerMirroredStrategy`` on a TF_CONFIG cluster, each worker
  a client of its own graph, gradients all-reduced (tf.estimator's independent-worker mode);
* ``between_graph``: the v1 ``ParameterServerStrategy`` on a cluster with ps tasks:
  variables on the ps, each worker stepping on its own (TF1's between-graph
  replication, which is what tf.estimator ran for it).

What TF's Estimator refused stays refused, with what to use instead.
"""
from __future__ import annotations

from typing import Any

from toolkit.estimator._run_config_checks import RunConfigError

__all__ = ["strategy_kind", "strategy_of", "strategy_trains"]

_KINDS = {
    "MirroredStrategy": "in_graph", "MirroredStrategyV1": "in_graph",
    "CentralStorageStrategy": "in_graph", "CentralStorageStrategyV1": "in_graph",
    "OneDeviceStrategy": "in_graph", "OneDeviceStrategyV1": "in_graph",
    "CollectiveAllReduceStrategy": "collective", "CollectiveAllReduceStrategyV1": "collective",
    "_CollectiveAllReduceStrategyExperimental": "collective",
    "ParameterServerStrategyV1": "between_graph",
}
_ALTERNATIVES = ("tf.distribute.MirroredStrategy (one machine), tf.distribute.MultiWorkerMirroredStrategy "
                 "(TF_CONFIG workers), tf.distribute.experimental.CentralStorageStrategy, "
                 "tf.compat.v1.distribute.experimental.ParameterServerStrategy, or strategies.make_strategy("
                 "'mirrored' / 'multi_worker_mirrored' / 'one_device')")
_REFUSED = {
    "TPUStrategyV2": "TPUStrategy needs a TPU, and this machine runs TensorFlow on CPU/GPU (TF's Estimator "
                     "refused TPUStrategy without one too). Use tf.distribute.MirroredStrategy (or "
                     "MultiWorkerMirroredStrategy on a cluster) and drop the TPUClusterResolver",
    "TPUStrategyV1": "TPUStrategy needs a TPU, and this machine runs TensorFlow on CPU/GPU. Use "
                     "tf.distribute.MirroredStrategy and drop the TPUClusterResolver",
    "ParameterServerStrategyV2": "TF 2's ParameterServerStrategy drives workers from one coordinator, which "
                                 "an Estimator never did (TF refused it: Please use "
                                 "`tf.compat.v1.distribute.experimental.ParameterServerStrategy` instead). "
                                 "Pass that v1 strategy, or leave train_distribute None: on a TF_CONFIG "
                                 "cluster with ps tasks the Estimator replicates between-graph by itself",
    "_DefaultDistributionStrategy": "the default strategy is no distribution at all. Leave the argument None",
}


def _names(value: Any) -> list[str]:
    return [cls.__name__ for cls in type(value).__mro__]


def strategy_kind(value: Any, field: str, *, has_cluster: bool, has_ps: bool) -> str:
    """``in_graph``, ``collective`` or ``between_graph`` for ``value``; refuses what the Estimator cannot run.

    Raises:
        RunConfigError: ``value`` is not a strategy the Estimator runs, naming it and what to pass instead.
    """
    names = _names(value)
    for name in names:
        if name in _REFUSED:
            raise RunConfigError(f"RunConfig `{field}` is {type(value).__name__}; {_REFUSED[name]}.", field=field)
    kind = next((_KINDS[name] for name in names if name in _KINDS), None)
    if kind is None:
        raise RunConfigError(f"RunConfig `{field}` is {type(value).__name__} {value!r:.60}; expected a "
                             f"tf.distribute strategy the Estimator runs: {_ALTERNATIVES}.", field=field)
    if kind == "collective" and not has_cluster:
        return "in_graph"  # MultiWorkerMirroredStrategy with no TF_CONFIG mirrors this machine's devices
    if kind == "between_graph" and not has_ps:
        return "in_graph"  # TF's v1 ParameterServerStrategy without ps tasks is central storage
    if kind == "collective" and field == "eval_distribute":
        raise RunConfigError(f"RunConfig `eval_distribute` is {type(value).__name__}; evaluation runs in one "
                             "process (the evaluator task, or after training), so it takes a one-machine "
                             "strategy: tf.distribute.MirroredStrategy, or None.", field=field)
    if kind == "in_graph" and has_cluster and field == "train_distribute":
        raise RunConfigError(f"RunConfig `train_distribute` is {type(value).__name__}, a one-machine strategy, "
                             "but TF_CONFIG describes a cluster. Use tf.distribute.MultiWorkerMirroredStrategy "
                             "(every worker trains, gradients all-reduced), or leave train_distribute None for "
                             "between-graph training with ps tasks.", field=field)
    return kind


def strategy_of(config: Any, field: str) -> tuple[Any, str | None]:
    """``(strategy, kind)`` of ``config.<field>`` as RunConfig classified it; ``(None, None)`` when unset."""
    kind = config.__dict__.get("_strategy_kinds", {}).get(field)
    return (getattr(config, field), kind) if kind else (None, None)


def strategy_trains(config: Any) -> bool:
    """Whether ``train_distribute`` is a strategy that runs training itself (in one graph, or all-reduced), not
    TF1's between-graph replication (the v1 ``ParameterServerStrategy`` on a cluster, or no strategy)."""
    return strategy_of(config, "train_distribute")[1] in ("in_graph", "collective")
