"""From a TFConfig to a running tf.distribute strategy, and server roles that end.

This package imports TensorFlow lazily (inside the functions that need it), so
checking a request costs milliseconds. It knows nothing about jobs or CLIs.

Example:
    >>> from strategies import run_role, make_strategy, chief_session   # doctest: +SKIP
    >>> cfg = run_role()                 # ps/worker tasks serve here, then exit  # doctest: +SKIP
    >>> strategy = make_strategy(tf_config=cfg)  # doctest: +SKIP
    >>> with chief_session(strategy):    # tells the servers to exit, 0 or 1  # doctest: +SKIP
    ...     train(strategy)
"""
from strategies._devices import configure_local_devices, local_gpu_count
from strategies._errors import StrategyError
from strategies._factory import choose_strategy, make_coordinator, make_strategy
from strategies._lean import SERVER_UNUSED_MODULES, TRAINER_UNUSED_MODULES, skip_imports
from strategies._names import STRATEGY_NAMES
from strategies._options import StrategyOptions
from strategies._roles import (
    EXIT_CHIEF_LOST,
    EXIT_CHIEF_NEVER_STARTED,
    EXIT_WORK_FAILED,
    is_server_role,
    run_role,
    serve,
)
from strategies._serve_options import ServeOptions
from strategies._shutdown import chief_session, shutdown_cluster
from tf_config.lazy import lazy_exports

# Model parallelism (device maps, sharded tables) imports TensorFlow, so these
# names load on first use and `import strategies` stays fast.
_LAZY_EXPORTS = {
    "DeviceMap": "strategies.device_map",
    "DeviceMapError": "strategies._placement_errors",
    "in_graph_session": "strategies.device_map",
    "run_in_graph_role": "strategies.device_map",
    "ShardedTable": "strategies.sharding",
    "ShardingError": "strategies._sharding_errors",
    "placement_report": "strategies._sharding_report",
    "ps_devices": "strategies.sharding",
    "SyncReplicas": "strategies.sync_replicas",
}

__all__ = [
    "EXIT_CHIEF_LOST",
    "EXIT_CHIEF_NEVER_STARTED",
    "EXIT_WORK_FAILED",
    "SERVER_UNUSED_MODULES",
    "STRATEGY_NAMES",
    "TRAINER_UNUSED_MODULES",
    "StrategyError",
    "ServeOptions",
    "StrategyOptions",
    "chief_session",
    "choose_strategy",
    "configure_local_devices",
    "is_server_role",
    "local_gpu_count",
    "make_coordinator",
    "make_strategy",
    "run_role",
    "serve",
    "shutdown_cluster",
    "skip_imports",
    "DeviceMap",
    "DeviceMapError",
    "ShardedTable",
    "ShardingError",
    "in_graph_session",
    "placement_report",
    "ps_devices",
    "run_in_graph_role",
    "SyncReplicas",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY_EXPORTS)
