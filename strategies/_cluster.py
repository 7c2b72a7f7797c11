"""What TensorFlow 2 needs to know about a TFConfig, in pure Python.

TF2's cluster resolvers only know the job name ``chief``; CMLE and TF1 call the
same task ``master``. The evaluator runs outside the training cluster (TF never
connects to it), so it is left out of the ClusterSpec given to TensorFlow.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence

_TF2_JOB_NAMES = {"master": "chief"}
_OUTSIDE_CLUSTER = ("evaluator",)


def tf2_job(task_type: str) -> str:
    """The job name TensorFlow 2 uses for ``task_type``."""
    return _TF2_JOB_NAMES.get(task_type, task_type)


def tf2_cluster(cluster: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The cluster as TF2's ClusterSpec wants it: ``master`` renamed, evaluator dropped."""
    return {
        tf2_job(job): list(addresses)
        for job, addresses in cluster.items()
        if job not in _OUTSIDE_CLUSTER and addresses
    }


#: a per-job value every task of one job shares (the launcher sets it); it keeps two jobs on the same
#: ports apart when they share a temp dir (e.g. on NFS)
ENV_JOB_NONCE = "TFDIST_JOB_NONCE"


def job_nonce(environ: Mapping[str, str] | None = None) -> str:
    """This job's nonce from the environment ('' when the tasks were not started by the launcher)."""
    return (os.environ if environ is None else environ).get(ENV_JOB_NONCE, "")


def cluster_token(cluster: Mapping[str, Sequence[str]], nonce: str | None = None) -> str:
    """A short stable id of a TF2 cluster and job, the same on every task that shares them.

    Args:
        cluster: the TF2 cluster.
        nonce: the job's nonce (None: ``job_nonce()``).
    """
    canonical = json.dumps({job: list(addrs) for job, addrs in cluster.items()}, sort_keys=True)
    nonce = job_nonce() if nonce is None else nonce
    return hashlib.sha256(f"{canonical}{nonce}".encode()).hexdigest()[:16]


def device(job: str, index: int) -> str:
    """The CPU device of one task, as TensorFlow names it in a cluster."""
    return f"/job:{job}/replica:0/task:{index}/device:CPU:0"


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) -> ``(host, port)``."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)
