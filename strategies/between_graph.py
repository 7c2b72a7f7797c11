"""TF1's between-graph replication on TF 2: each task its own client, variables on the ps tasks.

Every training task starts a ``tf.distribute.Server`` at its own address,
builds its own ``tf.Graph`` under ``replica_device_setter`` (variables
round-robin over the ps tasks, ops on the task itself), and opens a session on
its own server with device filters, so it needs only the ps tasks and itself.
The chief initialises the variables; the others wait for that with a
``SessionManager`` polling every ``RECOVERY_WAIT_SECS`` (TF's default, 30 s,
made a worker that started with the chief idle half a minute).

The job ends with the one serve/goodbye protocol (``strategies._shutdown``):
each worker reports done to the chief (``report_done``); the chief, once the
workers are done (or gone), tells every ps to exit (``end_job`` with a
``between_graph_ending``), and each ps (``strategies.serve``) exits with the
code it carries.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from strategies import _native as native
from strategies._server_threads import server_config
from strategies._shutdown import between_graph_ending, end_job, expect_trainers, report_done

__all__ = ["RECOVERY_WAIT_SECS", "STOP_GRACE_SECS", "FastWorkerSessionCreator", "between_graph_ending", "end_job",
           "expect_trainers", "replica_setter", "report_done", "session_config", "start_server"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

RECOVERY_WAIT_SECS = 0.25
# How long a closing MonitoredSession waits for its queue-runner threads (TF: 120 s). A
# SyncReplicasOptimizer chief's runner waits for gradients that no one will send once training is over.
STOP_GRACE_SECS = 2
_servers: dict[tuple[str, int], tf.distribute.Server] = {}


def start_server(cluster: Mapping[str, list[str]], job: str, index: int, *, protocol: str = "grpc") -> str:
    """Starts this task's server once per process; returns its session target (``grpc://...``).

    Its task runs TF1 graph steps only (an Estimator's training task): ``server_config(graph_only=True)``.
    """
    key = (job, index)
    if key not in _servers:
        native.load()  # for the steps built here and sent here (strategies._native)
        _servers[key] = tf.distribute.Server(tf.train.ClusterSpec(dict(cluster)), job_name=job, task_index=index,
                                             protocol=protocol, start=True,
                                             config=server_config(cluster, cluster[job][index], graph_only=True))
        logger.info("%s-%d: server at %s", job, index, _servers[key].target)
    return _servers[key].target


def replica_setter(cluster: Mapping[str, list[str]], job: str, index: int) -> Callable[[tf.Operation], str]:
    """Variables round-robin over the ps tasks, every other op on ``/job:<job>/task:<index>``."""
    return v1.train.replica_device_setter(ps_tasks=len(cluster.get("ps", [])),
                                          worker_device=f"/job:{job}/task:{index}", merge_devices=True,
                                          cluster=dict(cluster))


def session_config(job: str, index: int, **options: Any) -> tf.compat.v1.ConfigProto:  # ConfigProto fields
    """TF's distributed default: soft placement, device filters to the ps tasks and this task."""
    proto = v1.ConfigProto(allow_soft_placement=True, **options)
    proto.device_filters.extend(["/job:ps", f"/job:{job}/task:{index}"])
    return proto


class FastWorkerSessionCreator(tf.compat.v1.train.SessionCreator):
    """``WorkerSessionCreator`` with a short poll: a worker starts stepping right after the chief's init."""

    def __init__(self, scaffold: tf.compat.v1.train.Scaffold, master: str, config: tf.compat.v1.ConfigProto | None,
                 max_wait_secs: float = 7200) -> None:
        self._scaffold, self._master, self._config, self._max_wait = scaffold, master, config, max_wait_secs

    def create_session(self) -> tf.compat.v1.Session:
        self._scaffold.finalize()
        manager = v1.train.SessionManager(
            local_init_op=self._scaffold.local_init_op, local_init_feed_dict=self._scaffold.local_init_feed_dict,
            ready_op=self._scaffold.ready_op, ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
            graph=v1.get_default_graph(), recovery_wait_secs=RECOVERY_WAIT_SECS)
        return manager.wait_for_session(self._master, config=self._config, max_wait_secs=self._max_wait)
