"""``tf.train`` and ``tf.distribute`` of ``toolkit.compat.v1``: TF1's, with a ``Server`` whose ``join()`` ends.

In TF1 a ps task ends its script with ``server.join()``, which never returns
(tensorflow#25858). Here ``Server`` is ``strategies._hand_built``'s: ``join()``
serves until the chief (worker 0 in TF1's layout without a chief) says
goodbye, which it does at exit once the other workers are done, and then
ends the process with the goodbye's code (0 when training succeeded; atexit
handlers run), as TF1's ``join()`` never returned: the worker code a script
like Kubeflow's ``dist_mnist.py`` puts after ``server.join()``, with no
``return``, never runs on a ps. Everything else in both namespaces is
``tf.compat.v1``'s own, but ``train.MonitoredTrainingSession``, which carries
the preemption hook (``toolkit.compat._preemption``): a preempted ps tells the
chief and serves on until the chief has checkpointed at the step reached, then
exits 143, as does the chief.
"""
from __future__ import annotations

import functools
import logging
import types
from typing import Any

import tensorflow as _tf

from strategies._hand_built import server_class

__all__ = ["job_in_cluster", "namespace"]

logger = logging.getLogger(__name__)


def namespace(name: str) -> types.ModuleType:
    """``tf.compat.v1.<name>`` with ``Server`` replaced (``name`` is ``train`` or ``distribute``)."""
    original = getattr(_tf.compat.v1, name)
    module = types.ModuleType(f"toolkit.compat.v1.{name}", original.__doc__)
    server = _server()

    def __getattr__(attribute: str) -> Any:
        return getattr(original, attribute)

    def __dir__() -> list[str]:
        return sorted(set(dir(original)) | {"Server"})

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__, Server=server)
    if name == "train":
        from toolkit.compat._preemption import preemptible_session

        module.__dict__["MonitoredTrainingSession"] = preemptible_session(original.MonitoredTrainingSession)
    return module


#: the two names of the coordinating task: TF1 and CMLE say ``master``, TF2 and TFJob's Chief say ``chief``
_OTHER_NAME = {"master": "chief", "chief": "master"}


def job_in_cluster(cluster_def: Any, job_name: str | None) -> str | None:
    """``job_name`` as the cluster names it: ``master`` where the cluster says ``chief``, and the reverse.

    A CMLE-era script may start its server as ``master`` (census' TF-core
    sample takes the name from TF_CONFIG, others write it out) while the
    TF_CONFIG it runs under says ``chief`` (``useChiefInTfConfig``, a TFJob
    with a Chief, TF2's own layout), or the other way round. Both name the one
    task that coordinates, so the server starts as the cluster's name for it;
    any other name is left to TensorFlow, which refuses a job the cluster lacks.
    """
    if job_name not in _OTHER_NAME or isinstance(cluster_def, _tf.compat.v1.train.ServerDef):
        return job_name
    try:
        jobs = _tf.train.ClusterSpec(cluster_def).jobs
    except (TypeError, ValueError):
        return job_name  # TensorFlow says what is wrong with it
    other = _OTHER_NAME[job_name]
    if job_name in jobs or other not in jobs:
        return job_name
    _say_once(f"tf.train.Server: job_name {job_name!r} is not in the cluster, whose coordinating task is "
              f"{other!r} (TF_CONFIG's name for it); starting the server as {other!r}.")
    return other


@functools.cache
def _say_once(message: str) -> None:
    logger.warning(message)


@functools.cache
def _server() -> type:
    """``server_class()`` that remembers its task for the session and arms a ps's preemption."""
    from strategies._cluster import tf2_cluster, tf2_job
    from strategies._hand_built import task_config
    from strategies._server_preemption import arm
    from toolkit.compat._preemption import remember_server

    base = server_class()

    class Server(base):  # type: ignore[misc, valid-type]
        __doc__ = base.__doc__

        def __init__(self, server_or_cluster_def: Any, job_name: str | None = None, *args: Any,
                     **kwargs: Any) -> None:
            job_name = job_in_cluster(server_or_cluster_def, job_name)
            super().__init__(server_or_cluster_def, job_name, *args, **kwargs)
            cfg = task_config(self)
            cluster, job = tf2_cluster(cfg.cluster), tf2_job(cfg.task_type)
            remember_server(cluster, job, cfg.task_index)
            if job == "ps":  # serves (join()) from the start: on the signal it tells the chief and serves on
                arm(cluster, job, cfg.task_index)

    Server.__module__, Server.__qualname__ = base.__module__, "Server"
    return Server
