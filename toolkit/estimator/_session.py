"""The Estimator's between-graph replication (``strategies.between_graph``) from a ``RunConfig``, and its goodbye."""
from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf

from strategies import _native as native
from strategies import between_graph
from strategies._cluster import tf2_cluster, tf2_job
from strategies._net import is_listening

__all__ = [
    "FastWorkerSessionCreator",
    "chief_starts",
    "goodbye",
    "job_and_task",
    "native_tasks",
    "replica_setter",
    "server_target",
    "session_config",
    "worker_done",
]

v1 = tf.compat.v1
logger = logging.getLogger(__name__)
FastWorkerSessionCreator = between_graph.FastWorkerSessionCreator


def training_cluster(config: Any) -> dict[str, list[str]]:
    return tf2_cluster(config.tf_config.cluster)


def job_and_task(config: Any) -> tuple[str, int]:
    return tf2_job(config.task_type), config.task_id


#: how long a training task waits for the ps to listen before it builds its graph without the native kernel
NATIVE_PROBE_WAIT_SECS = 30.0


def native_tasks(config: Any, target: str) -> list[str]:
    """The ps tasks, and this one, that ran tfdist's native kernels (``strategies._native.probe``): TF1
    ``AdagradOptimizer``'s row updates of the variables on those ps run it
    (``toolkit._compat.tensorflow.native_tf1_adagrad``), and this task sums a lookup's gradient per
    row with it (``toolkit._rows``).

    A ps loads the kernel before its server listens, so the probe waits (at most
    ``NATIVE_PROBE_WAIT_SECS``) for every ps to listen; a ps that is not there by then, or that does not
    know the kernel (started by plain TensorFlow), gets TensorFlow's.
    """
    addresses = training_cluster(config).get("ps", [])
    if not addresses or native.load() is None:
        return []
    deadline = time.monotonic() + NATIVE_PROBE_WAIT_SECS
    while not all(is_listening(a, timeout=0.5) for a in addresses):
        if time.monotonic() > deadline:
            logger.info("the ps did not all listen within %.0f s: TensorFlow's sparse Adagrad kernel runs there",
                        NATIVE_PROBE_WAIT_SECS)
            return []
        time.sleep(0.2)
    job, index = job_and_task(config)
    tasks = native.probe([f"/job:ps/replica:0/task:{i}" for i in range(len(addresses))]
                         + [f"/job:{job}/replica:0/task:{index}"], target, config=session_config(config))
    ps = [task for task in tasks if task.startswith("/job:ps/")]
    if ps:
        from toolkit._compat.tensorflow import native_tf1_adagrad

        native_tf1_adagrad()
        logger.info("%s-%d: TF1 Adagrad's sparse updates on %s run tfdist's native kernel", config.task_type,
                    config.task_id, ", ".join(ps))
    if len(ps) < len(tasks):
        logger.info("%s-%d: its lookups' gradients are summed per row with tfdist's native kernel", config.task_type,
                    config.task_id)
    return tasks


def server_target(config: Any) -> str:
    """This task's session target: TF_CONFIG's ``session_master``, its own server, or ``''`` locally."""
    if config.is_local or config.is_evaluator:
        return ""
    from toolkit.estimator.run_config import _text

    explicit = _text(config._raw, "session_master")
    if explicit is not None:
        return explicit
    job, index = job_and_task(config)
    return between_graph.start_server(training_cluster(config), job, index,
                                      protocol=config.protocol or config.tf_config.rpc_layer or "grpc")


def replica_setter(config: Any) -> Any:
    """``config.device_fn``, else TF1's ``replica_device_setter`` when there are ps tasks, else None."""
    if config.device_fn is not None:
        return config.device_fn
    if config.num_ps_replicas == 0:
        return None
    return between_graph.replica_setter(training_cluster(config), *job_and_task(config))


def session_config(config: Any) -> Any:
    """The user's ``session_config``, else TF's distributed default (filters to the ps and this task)."""
    if config.session_config is not None and not getattr(config, "_session_config_derived", False):
        return config.session_config
    if config.is_local or config.is_evaluator or not config.num_ps_replicas:
        return v1.ConfigProto(allow_soft_placement=True)
    return between_graph.session_config(*job_and_task(config))


def chief_starts(config: Any) -> None:
    """On the chief, before training: forget done reports of an earlier job on the same addresses."""
    cluster = training_cluster(config)
    between_graph.expect_trainers(cluster, job_and_task(config), between_graph.between_graph_ending(cluster).trainers)


def worker_done(config: Any) -> None:
    """On a non-chief worker after training: tells the chief, which ends the ps once every worker is done."""
    from strategies._shutdown import chief_of

    cluster = training_cluster(config)
    between_graph.report_done(cluster, job_and_task(config), chief_of(cluster))


def release_sync_workers(spec: Any, config: Any) -> list[Any]:
    """In a SyncReplicasOptimizer job: a hook that, when this task stops, unblocks the others' last steps."""
    from toolkit._compat.tensorflow import sync_optimizers

    if config.is_local or config.num_worker_replicas < 2:
        return []
    return [_ReleaseTokensHook(opt.get_init_tokens_op(num_tokens=config.num_worker_replicas))
            for opt in sync_optimizers([*spec.training_hooks, *spec.training_chief_hooks])]


class _ReleaseTokensHook(tf.compat.v1.train.SessionRunHook):
    """Gives each waiting sync worker a token when this task stops, so their last step returns.

    TF1 left them blocked: a worker whose step waits for the token of an
    update that needs a contribution from a task that has already stopped.
    """

    def __init__(self, tokens_op: Any) -> None:
        self._op = tokens_op

    def end(self, session: Any) -> None:
        try:
            session.run(self._op)
        except (tf.errors.CancelledError, tf.errors.UnavailableError, tf.errors.AbortedError) as exc:
            # the token queue was closed (the chief finished first) or its ps is gone: nobody waits on it
            logger.info("sync tokens not released (%s): no task is left waiting", type(exc).__name__)


def arm_goodbye(config: Any) -> None:
    """The chief ends the ps tasks when its process exits (the one goodbye's atexit hook), after the workers."""
    from strategies._shutdown import arm

    arm(between_graph.between_graph_ending(training_cluster(config)))


def goodbye(config: Any, code: int) -> list[str]:
    """Waits for the workers to leave (on success), then tells every ps to exit with ``code``; once.

    A preempted chief has said it already, with 143, after its checkpoint
    (``toolkit.estimator._preemption.raise_if_preempted``): a later call is a no-op.
    """
    return between_graph.end_job(between_graph.between_graph_ending(training_cluster(config)), code)
