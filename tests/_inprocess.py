"""A parameter server and a worker as two in-process TensorFlow servers on loopback, for graph-mode tests."""
from __future__ import annotations

import socket


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def ps_and_worker_target() -> str:
    """Starts ``/job:ps/task:0`` and ``/job:worker/task:0`` in this process; the worker's ``grpc://`` target."""
    import tensorflow as tf

    spec = tf.train.ClusterSpec({"ps": [f"localhost:{_port()}"], "worker": [f"localhost:{_port()}"]})
    servers = [tf.distribute.Server(spec, job_name=job, task_index=0, start=True) for job in ("ps", "worker")]
    return servers[1].target
