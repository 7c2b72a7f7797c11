"""Thread pools of a task's server when several tasks of its cluster share one machine.

TensorFlow sizes each server's intra-op pool to every core of the machine. When
a cluster's tasks share a host (a local launch: ps, workers and chief on one
machine), each of them then splits small ops (a sparse update of a few thousand
rows, a split of a packed transfer) over threads that compete with the other
tasks' for the same cores: the hand-offs cost CPU and buy nothing. A server
whose host holds ``n`` tasks of the cluster gets ``cores // n`` intra-op
threads (at least 1) and two inter-op threads at least; a task alone on its
host keeps TensorFlow's defaults. The maths is the same; only the threading
changes.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["server_config", "tasks_on_host"]

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


def server_config(cluster: Mapping[str, Sequence[str]], address: str, *, cores: int | None = None) -> Any:
    """The ``ConfigProto`` for the server at ``address`` (None: TensorFlow's defaults, a task alone on its host)."""
    sharing = tasks_on_host(cluster, address)
    if sharing <= 1:
        return None
    import tensorflow as tf

    cores = cores or _usable_cores()
    intra = max(1, cores // sharing)
    logger.info("%d tasks of the cluster share this host's %d cores: the server at %s runs %d intra-op thread(s)",
                sharing, cores, address, intra)
    return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra, inter_op_parallelism_threads=max(2, intra))
