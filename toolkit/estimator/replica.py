"""TF1's between-graph replication (mnist_replica.py's process model) on TF 2.

In TF1 every worker was its own client sharing ps variables; TF 2 eager has
one client per cluster (two eager clients addressing the same ps variables
hang at the first remote op). The port keeps TF1's command lines and maps
them onto ParameterServerStrategy:

* ``--job_name=ps`` and ``--job_name=worker --task_index=N`` (N >= 1) serve,
  and exit when the coordinator says goodbye (``strategies.serve``);
* ``--job_name=worker --task_index=0`` (TF1's chief) is the coordinator. Its
  own worker slot is served by a child process (``_serve_child``, dies with
  the parent), and the coordinator joins the cluster as TF 2's ``chief`` on a
  free port of worker 0's host. Servers started from the TF1 flags accept the
  cluster definition the coordinator sends (chief added) when it connects.

Workers listed but not listening after ``worker_wait_secs`` are left out of
the coordinator's cluster, so the seed's "only the chief worker running" case
proceeds on worker 0 alone (ParameterServerStrategy would otherwise wait
forever for the missing task); a worker started later is not used.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Any

import portpicker

from tf_config import TFConfig

__all__ = ["ReplicaJob", "start_slot_server", "live_workers", "coordinator_config", "goodbye"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReplicaJob:
    """TF1's cluster flags: ``--job_name``, ``--task_index``, ``--ps_hosts``, ``--worker_hosts``."""

    job_name: str
    task_index: int
    ps_hosts: tuple[str, ...]
    worker_hosts: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ps_hosts", tuple(self.ps_hosts))
        object.__setattr__(self, "worker_hosts", tuple(self.worker_hosts))
        if self.job_name not in ("ps", "worker"):
            raise ValueError(f"`--job_name` is {self.job_name!r}; expected 'ps' or 'worker'. Pass --job_name=ps "
                             "or --job_name=worker.")
        self.server_config()  # validates hosts and index with the TF_CONFIG validator

    @classmethod
    def from_flags(cls, job_name: str, task_index: int, ps_hosts: str, worker_hosts: str) -> ReplicaJob:
        split = lambda text: tuple(h.strip() for h in text.split(",") if h.strip())  # noqa: E731
        return cls(job_name, task_index, split(ps_hosts), split(worker_hosts))

    @property
    def is_coordinator(self) -> bool:
        return self.job_name == "worker" and self.task_index == 0

    def server_config(self, job: str | None = None, index: int | None = None) -> TFConfig:
        """The TF1 cluster (ps + worker) as a TFConfig, for this task or another."""
        return TFConfig.from_dict({
            "cluster": {"ps": list(self.ps_hosts), "worker": list(self.worker_hosts)},
            "task": {"type": job or self.job_name, "index": self.task_index if index is None else index},
        })


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def start_slot_server(job: ReplicaJob, *, timeout: float = 120.0) -> subprocess.Popen:
    """Starts worker 0's server in a child process and waits until it listens."""
    import toolkit

    root = os.path.dirname(os.path.dirname(os.path.abspath(toolkit.__file__)))
    env = {**os.environ, "TF_CONFIG": job.server_config("worker", 0).to_json(),
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    child = subprocess.Popen([sys.executable, "-m", "toolkit.estimator._serve_child"], env=env)
    deadline = time.monotonic() + timeout
    while not _listening(job.worker_hosts[0]):
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            child.wait()
            raise RuntimeError(f"worker 0's server at {job.worker_hosts[0]} did not start (exit code "
                               f"{child.returncode}); is the port free?")
        time.sleep(0.3)
    return child


def live_workers(job: ReplicaJob, *, wait_secs: float) -> list[str]:
    """Worker addresses listening within ``wait_secs`` (ps tasks are waited for without limit)."""
    for ps in job.ps_hosts:
        while not _listening(ps):
            logger.info("waiting for ps at %s", ps)
            time.sleep(1.0)
    deadline = time.monotonic() + wait_secs
    pending = list(job.worker_hosts)
    while time.monotonic() < deadline and not all(_listening(w) for w in pending):
        time.sleep(0.5)
    live = [w for w in job.worker_hosts if _listening(w)]
    missing = [w for w in job.worker_hosts if w not in live]
    if missing:
        logger.warning("workers %s not listening after %.0f s; training without them", ", ".join(missing), wait_secs)
    return live


def coordinator_config(job: ReplicaJob, workers: list[str]) -> TFConfig:
    """TF 2's view: the live workers, the ps, and the coordinator as ``chief`` on a free port."""
    host = job.worker_hosts[0].rpartition(":")[0]
    port = portpicker.pick_unused_port()
    return TFConfig.from_dict({
        "cluster": {"ps": list(job.ps_hosts), "worker": workers, "chief": [f"{host}:{port}"]},
        "task": {"type": "chief", "index": 0},
    })


def make_coordinator_strategy(cfg: TFConfig) -> Any:
    """ParameterServerStrategy for the coordinator's cluster (servers are already up)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({job: list(addresses) for job, addresses in cfg.cluster.items()}),
        task_type="chief", task_id=0, rpc_layer="grpc")
    return tf.distribute.ParameterServerStrategy(resolver)


def goodbye(job: ReplicaJob, child: subprocess.Popen, exit_code: int, *, timeout: float = 30.0) -> int:
    """Tells every server of the TF1 cluster to exit with ``exit_code``; waits for the slot child."""
    from strategies import shutdown_cluster

    reached = shutdown_cluster(job.server_config("worker", 0), exit_code)
    logger.info("goodbye sent to %s", ", ".join(reached) or "no server")
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()
