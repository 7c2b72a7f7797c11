"""Thread pools of a task's server when several tasks of its cluster share one machine.

TensorFlow sizes each server's intra-op pool to every core of the machine. When
a cluster's tasks share a host (a local launch: ps, workers and chief on one
machine), each of them then splits small ops (a sparse update of a few thousand
rows, a split of a packed transfer) over threads that compete with the other
tasks' for the same cores: the hand-offs cost CPU and buy nothing. A server
whose host holds ``n`` tasks of the cluster gets ``cores // n`` intra-op threads
(at least 1); a task alone on its host keeps TensorFlow's defaults. The maths is
the same; only the threading changes.

Inter-op threads: at least 2, except on the servers of a graph-mode Estimator's
between-graph training (``graph_only``: its training tasks and ps run nothing but
TF1 graph steps), which get ``cores // n`` too. One inter-op thread runs a step's
ops one at a time; TensorFlow's waiting ops (``Recv``, queues, ``IteratorGetNext``)
give their thread back while they wait, so that is enough for TF1 graph steps,
and it saves the hand-offs (the click-through Estimator: 13% less CPU per
example). It is not enough for a server that also runs a ``ClusterCoordinator``'s
functions beside a blocked graph step (a ``toolkit.fit`` worker: measured, it
hangs), nor for a ``tf.py_func`` that itself runs a session on the same server.
``$TFDIST_INTER_OP_THREADS`` sets the count on every server.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ENV_INTER_OP", "server_config", "tasks_on_host"]

#: the inter-op threads of every server tfdist starts on a shared host (default: see the module's text)
ENV_INTER_OP = "TFDIST_INTER_OP_THREADS"

logger = logging.getLogger(__name__)

_LOOPBACK = "<loopback>"


def _host(address: str) -> str:
    host = address.rpartition(":")[0] if ":" in address else address
    host = host.strip("[]").lower()
    if host in ("localhost", "::1") or host.startswith("127."):
        return _LOOPBACK
    return host


def tasks_on_host(cluster: Mapping[str, Sequence[str]], address: str) -> int:
    """How many of ``cluster``'s task addresses are on ``address``'s host (every loopback name is one host)."""
    host = _host(address)
    return sum(1 for addresses in cluster.values() for other in addresses if _host(other) == host)


def _usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset), else the machine's."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def server_config(cluster: Mapping[str, Sequence[str]], address: str, *, cores: int | None = None,
                  graph_only: bool = False) -> Any:
    """The ``ConfigProto`` for the server at ``address`` (None: TensorFlow's defaults, a task alone on its host).

    ``graph_only``: the server runs only TF1 graph steps (an Estimator's between-graph training), so
    its share of the cores is enough inter-op threads; otherwise at least 2.
    """
    sharing = tasks_on_host(cluster, address)
    if sharing <= 1:
        return None
    import tensorflow as tf

    cores = cores or _usable_cores()
    intra = max(1, cores // sharing)
    inter = _inter_op_threads(intra if graph_only else max(2, intra))
    logger.info("%d tasks of the cluster share this host's %d cores: the server at %s runs %d intra-op and %d "
                "inter-op thread(s)", sharing, cores, address, intra, inter)
    return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra, inter_op_parallelism_threads=inter)


def _inter_op_threads(default: int) -> int:
    value = os.environ.get(ENV_INTER_OP, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        from strategies._errors import StrategyError

        raise StrategyError(f"${ENV_INTER_OP}={value!r} is not a thread count: give a whole number of at least 1 "
                            f"(or unset it for this server's default, {default})", field=ENV_INTER_OP)
    return int(value)
