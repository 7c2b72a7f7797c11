"""The strategy factory: a TFConfig and a name in, a tf.distribute strategy out.

Everything that can be checked without TensorFlow is checked first (the name,
the options, the TF_CONFIG against the strategy's needs), so a cluster that
cannot work fails in milliseconds with the validator's message instead of
after a TensorFlow import and a hung connection. ``import tensorflow`` lives
inside the builders for the same reason.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from strategies._cluster import tf2_cluster, tf2_job
from strategies._devices import configure_local_devices, local_gpu_count
from strategies._errors import StrategyError
from strategies._names import check_name
from strategies._net import wait_listening
from strategies._options import APPLIES_TO, StrategyOptions
from strategies._roles import is_server_role
from strategies._shutdown import greet

if TYPE_CHECKING:  # TensorFlow is imported inside the builders, after the cheap checks
    import tensorflow as tf

    from strategies._types import DistributionStrategy
    from tf_config import TFConfig

logger = logging.getLogger(__name__)


def _resolver(cfg: TFConfig) -> tf.distribute.cluster_resolver.ClusterResolver:
    """A resolver built from our TFConfig, so TensorFlow never re-reads the environment."""
    import tensorflow as tf

    gpus = local_gpu_count()
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(tf2_cluster(cfg.cluster)),
        task_type=tf2_job(cfg.task_type),
        task_id=cfg.task_index,
        rpc_layer=cfg.rpc_layer or "grpc",
        num_accelerators={"GPU": gpus} if gpus else None,
    )


def _partitioner(options: StrategyOptions) -> tf.distribute.experimental.partitioners.Partitioner | None:
    if options.partitioner is None:
        return None
    import tensorflow as tf

    classes = {
        "min_size": tf.distribute.experimental.partitioners.MinSizePartitioner,
        "max_size": tf.distribute.experimental.partitioners.MaxSizePartitioner,
        "fixed_shards": tf.distribute.experimental.partitioners.FixedShardsPartitioner,
    }
    return classes[options.partitioner](**options.partitioner_args)


def _build_parameter_server(cfg: TFConfig, options: StrategyOptions) -> tf.distribute.ParameterServerStrategy:
    import tensorflow as tf

    servers = [addr for job in ("ps", "worker") for addr in cfg.cluster.get(job, ())]
    silent = wait_listening(servers, timeout=options.connect_timeout)
    if silent:
        raise StrategyError(
            f"parameter_server: {len(silent)} task(s) not listening after connect_timeout="
            f"{options.connect_timeout:g} s: {', '.join(silent)}. Start those tasks (run_role() serves "
            "them), or raise connect_timeout.", field="connect_timeout"
        )
    strategy = tf.distribute.ParameterServerStrategy(_resolver(cfg), variable_partitioner=_partitioner(options))
    greet(strategy)  # the servers know the chief is up, and hear its goodbye at exit at the latest
    return strategy


def _build_multi_worker_mirrored(cfg: TFConfig,
                                 options: StrategyOptions) -> tf.distribute.MultiWorkerMirroredStrategy:
    import tensorflow as tf

    implementations = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }
    communication = tf.distribute.experimental.CommunicationOptions(
        implementation=implementations[options.communication or "auto"],
        timeout_seconds=options.timeout_seconds,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=_resolver(cfg),
                                                    communication_options=communication)


def _mirrored_devices(options: StrategyOptions) -> Sequence[str] | None:
    if options.devices is not None:
        return options.devices
    if options.logical_cpus and not local_gpu_count():
        return [f"/cpu:{i}" for i in range(options.logical_cpus)]
    return None


def _build_mirrored(cfg: TFConfig, options: StrategyOptions) -> tf.distribute.MirroredStrategy:
    import tensorflow as tf

    ops = {
        "nccl": tf.distribute.NcclAllReduce,
        "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
        "reduce_to_one": tf.distribute.ReductionToOneDevice,
    }
    cross_device_ops = ops[options.cross_device_ops]() if options.cross_device_ops else None
    return tf.distribute.MirroredStrategy(devices=_mirrored_devices(options), cross_device_ops=cross_device_ops)


def _build_one_device(cfg: TFConfig, options: StrategyOptions) -> tf.distribute.OneDeviceStrategy:
    import tensorflow as tf

    if options.devices is not None and len(options.devices) != 1:
        raise StrategyError(
            f"one_device takes exactly one device; `devices` is {list(options.devices)!r}. "
            'Pass e.g. devices=["/gpu:0"], or use mirrored for several devices.', field="devices"
        )
    default = "/gpu:0" if local_gpu_count() else "/cpu:0"
    return tf.distribute.OneDeviceStrategy(options.devices[0] if options.devices else default)


def _build_default(cfg: TFConfig, options: StrategyOptions) -> tf.distribute.Strategy:
    import tensorflow as tf

    return tf.distribute.get_strategy()


BUILDERS: Mapping[str, Callable[[TFConfig, StrategyOptions], DistributionStrategy]] = MappingProxyType({
    "parameter_server": _build_parameter_server,
    "multi_worker_mirrored": _build_multi_worker_mirrored,
    "mirrored": _build_mirrored,
    "one_device": _build_one_device,
    "default": _build_default,
})
_ONE_PROCESS = ("mirrored", "one_device", "default")


def _choose(name: str, cfg: TFConfig) -> tuple[str, str, str]:
    """(strategy to build, strategy to validate the cluster against, why).

    ``auto`` follows the validator's recommendation. The evaluator never joins
    the training cluster: it builds a one-process strategy, while the cluster
    is still checked against the strategy the trainers use.
    """
    from tf_config import recommend_strategy

    if cfg.is_evaluator and name in ("auto", *_ONE_PROCESS):
        training = recommend_strategy(cfg)[0]
        build = "default" if name == "auto" else name
        return build, training, f"the evaluator evaluates on its own while the cluster trains with {training}"
    if name != "auto":
        return name, name, "requested by name"
    chosen, reason = recommend_strategy(cfg)
    if chosen == "default":  # only a one-process run depends on the GPU count
        chosen, reason = recommend_strategy(cfg, num_local_gpus=local_gpu_count())
    return chosen, chosen, reason


def _check_role(name: str, cfg: TFConfig) -> None:
    """Rejects building a cluster strategy in a task that cannot host it."""
    if name == "parameter_server" and is_server_role(cfg):
        raise StrategyError(
            f"TF_CONFIG task is {cfg.task_type}-{cfg.task_index}; under parameter_server that task serves "
            "and only the chief builds the strategy. Call strategies.run_role(cfg) first: it serves and "
            "exits in ps/worker tasks and returns in the chief.", field="tf_config.task"
        )
    if name in ("parameter_server", "multi_worker_mirrored") and cfg.is_evaluator:
        raise StrategyError(
            f"TF_CONFIG task is evaluator-{cfg.task_index}; the evaluator is not part of the {name} "
            "cluster. Build 'default' (or 'auto') in the evaluator.", field="tf_config.task"
        )


def _check_options(requested: str, chosen: str, options: StrategyOptions) -> None:
    ignored = options.check_applies(chosen)
    if not ignored:
        return
    if requested == "auto":
        logger.warning("auto chose %s, which ignores option(s) %s", chosen, ", ".join(ignored))
        return
    field = ignored[0]
    value = getattr(options, field)
    raise StrategyError(
        f"Strategy option `{field}` is {dict(value) if field == 'partitioner_args' else value!r} but "
        f"{chosen} does not use it (it applies to {', '.join(APPLIES_TO[field])}). Drop the option, "
        "or pick a strategy it applies to.", field=field
    )


def _warn_if_env_disagrees(cfg: TFConfig) -> None:
    """Keras and TF internals read TF_CONFIG themselves; say so if it differs from ``cfg``."""
    from tf_config import TFConfig, TFConfigError

    try:
        env_cfg = TFConfig.from_env()
    except TFConfigError as exc:
        logger.warning("TF_CONFIG in the environment is invalid (%s); the explicit tf_config is used", exc)
        return
    if not env_cfg.is_local and env_cfg.to_dict() != cfg.to_dict():
        logger.warning("TF_CONFIG in the environment differs from the tf_config passed to make_strategy; "
                       "the strategy uses the explicit one, but code that reads TF_CONFIG will not")


def make_strategy(name: str = "auto", *, tf_config: TFConfig | None = None, communication: str | None = None,
                  timeout_seconds: float | None = None, devices: Sequence[str] | None = None,
                  cross_device_ops: str | None = None, partitioner: str | None = None,
                  partitioner_args: Mapping[str, int] | None = None, logical_cpus: int | None = None,
                  connect_timeout: float = 300.0) -> DistributionStrategy:
    """Builds the tf.distribute strategy for this task.

    Example:
        >>> strategy = make_strategy()                          # doctest: +SKIP
        >>> strategy = make_strategy("mirrored", logical_cpus=2)  # doctest: +SKIP

    Args:
        name: ``auto`` or one of ``STRATEGY_NAMES``. ``auto`` picks
            parameter_server when the cluster has ps tasks, multi_worker_mirrored
            when it has several workers, mirrored with several local GPUs, and
            default otherwise, and logs why.
        tf_config: this task's ``TFConfig``; None reads TF_CONFIG.
        communication, timeout_seconds, devices, cross_device_ops, partitioner,
        partitioner_args, logical_cpus: see ``StrategyOptions``.
        connect_timeout: parameter_server only: seconds to wait for every ps
            and worker to listen before giving up (TensorFlow would wait forever).

    Returns:
        The strategy. For parameter_server, get the coordinator with
        ``make_coordinator(strategy)``.

    Raises:
        StrategyError: unknown name, bad option, or a task that cannot build it.
        tf_config.TFConfigError: the TF_CONFIG cannot serve the strategy.
    """
    check_name(name)
    options = StrategyOptions(communication=communication, timeout_seconds=timeout_seconds, devices=devices,
                              cross_device_ops=cross_device_ops, partitioner=partitioner,
                              partitioner_args=partitioner_args or {}, logical_cpus=logical_cpus,
                              connect_timeout=connect_timeout)
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if tf_config is None else tf_config
    chosen, reason = choose_strategy(name, tf_config=cfg)
    _check_options(name, chosen, options)
    if tf_config is not None:
        _warn_if_env_disagrees(cfg)
    logger.info("strategy %s for %s-%d: %s", chosen, cfg.task_type, cfg.task_index, reason)
    if options.logical_cpus:
        configure_local_devices(options.logical_cpus)
    return BUILDERS[chosen](cfg, options)


def choose_strategy(name: str = "auto", *, tf_config: TFConfig | None = None) -> tuple[str, str]:
    """The strategy ``make_strategy`` would build here, and why, without building it.

    Runs every check that needs no cluster connection: the name, the task's
    role, and the TF_CONFIG against the strategy's rules. Only ``auto`` in a
    one-process run looks at the local GPUs (and so imports TensorFlow).

    Raises:
        StrategyError: unknown name, or a task that cannot build the strategy.
        tf_config.TFConfigError: the TF_CONFIG cannot serve the strategy.
    """
    check_name(name)
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if tf_config is None else tf_config
    chosen, cluster_strategy, reason = _choose(name, cfg)
    _check_role(chosen, cfg)
    cfg.check(strategy=cluster_strategy)
    return chosen, reason


def make_coordinator(strategy: DistributionStrategy) -> tf.distribute.experimental.coordinator.ClusterCoordinator:
    """The ClusterCoordinator of a ParameterServerStrategy (TensorFlow keeps one per strategy)."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.ParameterServerStrategy):
        raise StrategyError(
            f"make_coordinator needs a ParameterServerStrategy; received {type(strategy).__name__}. "
            "Build it with make_strategy('parameter_server') on the chief.", field="strategy"
        )
    return tf.distribute.coordinator.ClusterCoordinator(strategy)

