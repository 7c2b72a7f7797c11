"""In-graph replication: one client places layers on other tasks' devices.

For a device map that spans machines, one process (the client: the chief, or
worker 0 without a chief) builds the whole model and connects to the cluster
with ``tf.config.experimental_connect_to_cluster``; every other task only
hosts devices. Hosts serve until the client says goodbye (an exit file the
client writes *through the cluster*, on the host's own machine, as
``strategies.shutdown_cluster`` does for parameter servers) or until the
client has been unreachable for a while, so no host outlives its job.

Example (every task runs the same script)::

    cfg = run_in_graph_role()                 # hosts serve here, then exit
    with in_graph_session(cfg) as devices:    # the client connects
        model = DeviceMap({"head": devices[0]}).build(...)
"""
from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

import tensorflow as tf

from strategies._cluster import device, tf2_cluster, tf2_job
from strategies._net import wait_listening
from strategies._placement_errors import DeviceMapError
from strategies._roles import serve_until_goodbye
from strategies._serve_options import ServeOptions
from strategies._shutdown import say_goodbye
from tf_config import Problem, TFConfig

__all__ = ["connect_devices", "in_graph_session", "release_devices", "run_in_graph_role", "serve_devices"]

logger = logging.getLogger(__name__)


def _error(field: str, message: str) -> DeviceMapError:
    return DeviceMapError([Problem("error", field, message)])


def _hosts(cfg: TFConfig) -> list[tuple[str, int, str]]:
    """(job, index, address) of every task but this one."""
    me = (tf2_job(cfg.task_type), cfg.task_index)
    return [(job, i, addr) for job, addrs in tf2_cluster(cfg.cluster).items()
            for i, addr in enumerate(addrs) if (job, i) != me]


def connect_devices(cfg: TFConfig, *, timeout: float = 300.0) -> list[str]:
    """Connects this (client) task to the cluster; returns the hosts' devices.

    Raises:
        DeviceMapError: no cluster, not the client task, or a host that does
            not listen within ``timeout`` seconds.
    """
    if cfg.is_local or not cfg.is_chief:
        raise _error("tf_config.task", (
            f"TF_CONFIG task is {cfg.task_type}-{cfg.task_index} "
            f"({'no cluster' if cfg.is_local else 'not the client'}); only the chief (or worker 0 "
            "without a chief) of a cluster connects for in-graph placement. Call run_in_graph_role() "
            "first: it serves in host tasks and returns in the client."))
    silent = wait_listening([addr for _, _, addr in _hosts(cfg)], timeout=timeout)
    if silent:
        raise _error("timeout", (
            f"{len(silent)} task(s) not listening after timeout={timeout:g} s: {', '.join(silent)}. "
            "Start them (run_in_graph_role() serves them) or raise the timeout."))
    tf.config.experimental_connect_to_cluster(
        tf.train.ClusterSpec(tf2_cluster(cfg.cluster)),
        job_name=tf2_job(cfg.task_type),
        task_index=cfg.task_index,
        protocol=cfg.rpc_layer or "grpc",
    )
    return [device(job, i) for job, i, _ in _hosts(cfg)]


def release_devices(cfg: TFConfig, exit_code: int = 0) -> list[str]:
    """Tells every host to exit with ``exit_code`` (the parameter servers' goodbye); returns the tasks told."""
    told = say_goodbye(tf2_cluster(cfg.cluster), [(job, index) for job, index, _ in _hosts(cfg)], exit_code)
    logger.info("told %s to exit with code %d", ", ".join(told) or "no host", exit_code)
    return told


@contextlib.contextmanager
def in_graph_session(cfg: TFConfig, *, timeout: float = 300.0) -> Iterator[list[str]]:
    """Connects the client, yields the hosts' devices, then releases the hosts (0, or 1 on error)."""
    devices = connect_devices(cfg, timeout=timeout)
    try:
        yield devices
    except BaseException:
        release_devices(cfg, 1)
        raise
    release_devices(cfg, 0)


def serve_devices(cfg: TFConfig, *, options: ServeOptions | None = None) -> int:
    """Hosts this task's devices until the client releases them; returns the exit code.

    The same serve/goodbye protocol, and the same ``ServeOptions``, as
    parameter servers (``strategies.serve``; the client plays the chief): the
    code is the client's (0 after success), ``EXIT_CHIEF_LOST`` or
    ``EXIT_CHIEF_NEVER_STARTED``.
    """
    return serve_until_goodbye(cfg, ServeOptions.from_env() if options is None else options, peer="client")


def run_in_graph_role(tf_config: TFConfig | None = None, *, options: ServeOptions | None = None) -> TFConfig:
    """Serves and exits in host tasks; returns the ``TFConfig`` in the client.

    Put it at the top of a model-parallel script run on every task.
    """
    cfg = TFConfig.from_env() if tf_config is None else tf_config
    if cfg.is_local or cfg.is_chief:
        return cfg
    sys.exit(serve_devices(cfg, options=options))
