"""Steps a parameter-server chief ships to its workers as graphs, and the loop that runs them.

Under ``ClusterCoordinator`` every execution of steps is a closure the chief sends a worker (a
round trip and a multi-device function call per execution). In TF1's between-graph replication
each worker was its own client and ran its own graph. A worker that only serves (the tutorial's
``run_role()`` at the top of the script never lets it reach the training code) can still do the
latter: the chief builds each worker's whole step graph (input pipeline, forward and backward
pass, the updates on the ps) and publishes it on the first ps; the worker imports it and runs it
in its own session, one ``session.run`` per step token the chief releases (see
``toolkit.training.between_graph``), until the chief closes the token queue. The worker needs
TensorFlow alone: no model code, no Keras.

Published on the first ps (``/job:ps/replica:0/task:0``), as named string variables:

* ``SHIPPED_MANIFEST``: JSON ``{"id", "fetches": {"token", "train", "initializer", "ready"}}``;
  a new ``id`` for each ``fit``, so a worker runs each published graph once;
* ``shipped_graph_name(i)``: worker ``i``'s serialized ``GraphDef``.

Each worker raises ``SHIPPED_FLAG`` (a variable on its own device) when it starts, so the chief
knows who will take shipped steps before it ships any.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["MANIFEST_DEVICE", "SHIPPED_FLAG", "SHIPPED_MANIFEST", "run_token_loop", "shipped_graph_name",
           "shipped_steps_work"]

logger = logging.getLogger(__name__)

MANIFEST_DEVICE = "/job:ps/replica:0/task:0"
SHIPPED_FLAG = "tfdist_shipped_steps_worker"
SHIPPED_MANIFEST = "tfdist_shipped_steps"
#: how often a waiting worker reads the manifest (one small read of the first ps)
_POLL_SECS = 0.5
#: how long a stopping worker's loop may take to finish its step before its wait for a token is cancelled
_FINISH_SECS = 2.0


def shipped_graph_name(index: int) -> str:
    """The shared name of worker ``index``'s serialized graph."""
    return f"{SHIPPED_MANIFEST}/graph/{index}"


def _string_variable(name: str, device: str) -> Any:
    import tensorflow as tf

    with tf.compat.v1.device(device):
        return tf.raw_ops.VarHandleOp(dtype=tf.string, shape=[], shared_name=name, container="")


def shipped_steps_work(index: int) -> Any:
    """A serving worker's work (``serve(work=...)``): run every step graph the chief ships, until stopped."""

    def work(target: str, stop: threading.Event) -> int:
        return _serve_shipped(target, index, stop)

    return work


def _serve_shipped(target: str, index: int, stop: threading.Event) -> int:
    import tensorflow as tf

    v1 = tf.compat.v1
    worker_device = f"/job:worker/replica:0/task:{index}"
    config = v1.ConfigProto(device_filters=["/job:ps", worker_device])
    graph = tf.Graph()
    with graph.as_default():
        with v1.device(worker_device):
            flag = tf.raw_ops.AssignVariableOp(
                resource=tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[], shared_name=SHIPPED_FLAG, container=""),
                value=tf.constant(1, tf.int64))
        manifest = _string_variable(SHIPPED_MANIFEST, MANIFEST_DEVICE)
        ready = tf.raw_ops.VarIsInitializedOp(resource=manifest)
        value = tf.raw_ops.ReadVariableOp(resource=manifest, dtype=tf.string)
        shipped = _string_variable(shipped_graph_name(index), MANIFEST_DEVICE)
        graph_def = tf.raw_ops.ReadVariableOp(resource=shipped, dtype=tf.string)
    steps, seen = 0, None
    with v1.Session(target, graph=graph, config=config) as session:
        session.run(flag)
        while not stop.wait(_POLL_SECS):
            try:
                published = json.loads(session.run(value).decode()) if session.run(ready) else None
                if published is None or published["id"] == seen:
                    continue
                serialized = session.run(graph_def)
            except tf.errors.OpError as exc:  # the first ps is going away (the job ends) or not there yet
                logger.debug("worker-%d: no shipped steps to read (%s)", index, type(exc).__name__)
                continue
            seen = published["id"]
            steps += _run_shipped(target, config, serialized, published["fetches"], index, stop)
    return steps


def _run_shipped(target: str, config: Any, serialized: bytes, fetches: dict[str, Any], index: int,
                 stop: threading.Event) -> int:
    import tensorflow as tf

    graph = tf.Graph()
    graph_def = tf.compat.v1.GraphDef.FromString(serialized)
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    logger.info("worker-%d: running the chief's shipped steps (%d graph nodes)", index, len(graph_def.node))
    return run_token_loop(target, graph, config, token=graph.get_tensor_by_name(fetches["token"]),
                          train=[graph.get_operation_by_name(name) for name in fetches["train"]],
                          initializer=graph.get_operation_by_name(fetches["initializer"]),
                          ready=graph.get_operation_by_name(fetches["ready"]), index=index, stop=stop)


#: the step sessions of this process, open until it ends (``run_token_loop``)
_OPEN_SESSIONS: list[Any] = []


def run_token_loop(target: str, graph: Any, config: Any, *, token: Any, train: Sequence[Any], initializer: Any,
                   ready: Any, index: int, stop: threading.Event, log: logging.Logger = logger) -> int:
    """One ``session.run`` of ``[token, *train]`` per token until the queue closes (or ``stop``); returns the steps.

    ``initializer`` starts the input pipeline, ``ready`` tells the chief this worker is about to step.
    ``log``: where the loop says when its steps are ready and how many it ran (the caller's logger, which
    scripts turn up by name, e.g. ``toolkit.training.between_graph_worker``).
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    steps = 0
    session = v1.Session(target, graph=graph, config=config)
    # Left open when the loop ends, until the process ends (it leaves with os._exit, strategies._roles):
    # closing it deletes this task's worker session, whose input iterator's tf.data autotune thread can take
    # up to a minute to stop (TF 2.21), while TensorFlow holds the task's session-manager lock, so the
    # chief's goodbye (a new session on this task) waited 30 s unanswered and the task exited 3.
    _OPEN_SESSIONS.append(session)
    # Watched from the start: a ps that exits (the job is over) while this worker still initializes
    # must not leave a call in flight when the process exits.
    done = threading.Event()
    watcher = threading.Thread(target=_close_on_stop, args=(session, stop, done), daemon=True,
                               name=f"worker-{index} stop watcher")
    watcher.start()
    try:
        session.run(initializer)
        session.run(ready)
        run_steps = session.make_callable([token, *train])
        log.info("worker-%d: between-graph steps ready", index)
        if not stop.is_set():
            steps += _first_execution(session, [token, *train], index, log)
        while not stop.is_set():
            steps += int(run_steps()[0])
    except tf.errors.OutOfRangeError:  # the chief closed the queue: training is over
        pass
    except (tf.errors.OpError, RuntimeError) as exc:
        if not stop.is_set() and not isinstance(exc, tf.errors.CancelledError):
            raise
        # this task is stopping: its call was cancelled, or its session closed, or the ps is gone
        log.info("worker-%d: stopped during a call (%s)", index, type(exc).__name__)
    finally:
        done.set()
        watcher.join()
    log.info("worker-%d: between-graph steps done: %d steps", index, steps)
    return steps


def _first_execution(session: Any, fetches: list[Any], index: int, log: logging.Logger) -> int:
    """Runs one execution and logs how many tensors crossed between tasks in it; returns its steps."""
    import tensorflow as tf

    v1 = tf.compat.v1
    metadata = v1.RunMetadata()
    ran = session.run(fetches, options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)[0]
    received = [node.attr["tensor_name"].s.decode() for graph_def in metadata.partition_graphs
                for node in graph_def.node if node.op == "_Recv" and not node.attr["client_terminated"].b]
    log.info("worker-%d: an execution of up to %d step(s) moves %d tensors between tasks", index,
                (len(fetches) - 1) // 2, len(received))
    log.debug("worker-%d: the tensors an execution moves: %s", index, sorted(received))
    return int(ran)


def _close_on_stop(session: Any, stop: threading.Event, done: threading.Event) -> None:
    """Ends the loop of a task that stops (preempted, or its chief gone) without touching the shared queue.

    The loop ends by itself after its current step while tokens flow; a loop still waiting for a token
    after ``_FINISH_SECS`` has its session closed, which cancels the wait and leaves the token to the others.
    """
    while not done.is_set():
        if stop.wait(0.5):
            if not done.wait(_FINISH_SECS):
                session.close()
            return
