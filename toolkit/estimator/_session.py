"""Between-graph replication, as TF1 ran it: one server per task, variables on the ps, sessions that start fast.

Every training task (chief and workers) is its own client: it starts a
``tf.distribute.Server`` at its TF_CONFIG address, builds its own graph with
variables placed on the ps tasks by ``replica_device_setter``, and opens a
session on its own server, with device filters so that it only needs the ps
and itself. The chief initialises the variables; a worker waits for that with
a ``SessionManager`` polling every ``_RECOVERY_WAIT_SECS`` (TF's default is 30 s).

ps tasks serve through ``strategies.serve`` and exit on the chief's goodbye
(``strategies._shutdown.exit_file``), which the chief writes on each ps by
running a ``write_file`` op on that ps's device, once every worker has left.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf

from strategies._cluster import device, tf2_cluster, tf2_job
from strategies._net import is_listening
from strategies._shutdown import exit_file

__all__ = ["FastWorkerSessionCreator", "job_and_task", "replica_setter", "say_goodbye", "server_target",
           "session_config", "wait_for_workers"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

_RECOVERY_WAIT_SECS = 0.25
_servers: dict[str, Any] = {}


def training_cluster(config: Any) -> dict[str, list[str]]:
    return tf2_cluster(config.tf_config.cluster)


def job_and_task(config: Any) -> tuple[str, int]:
    return tf2_job(config.task_type), config.task_id


def server_target(config: Any) -> str:
    """This task's session target: its own in-process server (started once), or ``''`` locally."""
    if config.is_local or config.is_evaluator:
        return ""
    from toolkit.estimator.run_config import _text

    explicit = _text(config._raw, "session_master")
    if explicit is not None:
        return explicit
    job, index = job_and_task(config)
    key = f"{job}:{index}"
    if key not in _servers:
        cluster = training_cluster(config)
        _servers[key] = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index,
                                             protocol=config.protocol or config.tf_config.rpc_layer or "grpc",
                                             start=True)
        logger.info("%s-%d: server at %s", job, index, _servers[key].target)
    return _servers[key].target


def replica_setter(config: Any) -> Any:
    """TF1's placement: variables round-robin over the ps tasks, ops on this task. None without ps."""
    if config.device_fn is not None:
        return config.device_fn
    if config.num_ps_replicas == 0:
        return None
    job, index = job_and_task(config)
    return v1.train.replica_device_setter(ps_tasks=config.num_ps_replicas,
                                          worker_device=f"/job:{job}/task:{index}",
                                          merge_devices=True, cluster=training_cluster(config))


def session_config(config: Any) -> Any:
    """The user's ``session_config``, else TF's distributed default: filters to the ps and this task."""
    if config.session_config is not None:
        return config.session_config
    proto = v1.ConfigProto(allow_soft_placement=True)
    if not config.is_local and not config.is_evaluator and config.num_ps_replicas:
        job, index = job_and_task(config)
        proto.device_filters.extend(["/job:ps", f"/job:{job}/task:{index}"])
        proto.isolate_session_state = False
    return proto


class FastWorkerSessionCreator(v1.train.SessionCreator):
    """``WorkerSessionCreator`` with a short poll: a worker starts stepping right after the chief's init."""

    def __init__(self, scaffold: Any, master: str, config: Any, max_wait_secs: float) -> None:
        self._scaffold, self._master, self._config, self._max_wait = scaffold, master, config, max_wait_secs

    def create_session(self) -> Any:
        self._scaffold.finalize()
        manager = v1.train.SessionManager(
            local_init_op=self._scaffold.local_init_op, local_init_feed_dict=self._scaffold.local_init_feed_dict,
            ready_op=self._scaffold.ready_op, ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
            graph=v1.get_default_graph(), recovery_wait_secs=_RECOVERY_WAIT_SECS)
        return manager.wait_for_session(self._master, config=self._config, max_wait_secs=self._max_wait)


def wait_for_workers(config: Any, *, timeout: float) -> list[str]:
    """On the chief: waits until every other worker's server is gone (its process ended); returns late ones."""
    cluster = training_cluster(config)
    addresses = {f"worker-{i}": a for i, a in enumerate(cluster.get("worker", []))}
    deadline = time.monotonic() + timeout
    while True:
        alive = [name for name, address in addresses.items() if is_listening(address, timeout=0.5)]
        if not alive or time.monotonic() > deadline:
            if alive:
                logger.warning("workers still running after %.0f s: %s; ending the job anyway", timeout,
                               ", ".join(alive))
            return alive
        time.sleep(0.2)


def say_goodbye(config: Any, target: str, code: int) -> list[str]:
    """On the chief: writes the goodbye exit file inside every ps (the toolkit's protocol); returns who got it."""
    cluster = training_cluster(config)
    reached = []
    for index in range(len(cluster.get("ps", []))):
        with tf.Graph().as_default():
            with tf.device(device("ps", index)):
                op = tf.io.write_file(exit_file(cluster, "ps", index), str(code))
            job, task = job_and_task(config)
            proto = v1.ConfigProto(device_filters=[f"/job:ps/task:{index}", f"/job:{job}/task:{task}"])
            proto.operation_timeout_in_ms = 10000
            try:
                with v1.Session(target, config=proto) as sess:
                    sess.run(op)
            except tf.errors.OpError as exc:
                logger.warning("could not reach ps-%d (%s)", index, str(exc).splitlines()[0])
                continue
        reached.append(f"ps-{index}")
    logger.info("told %s to exit with code %d", ", ".join(reached) or "no ps", code)
    return reached
