"""A serving worker runs the step graphs a chief ships (``strategies._shipped_steps``), one ``fit`` after another.

Two in-process servers (a ps and a worker). The "chief" (this test) publishes a graph in which each
token adds its value to a counter on the ps, the way ``keras_dist._ship`` publishes a worker's steps;
the worker's work (what ``run_role()`` runs beside a serving worker) must raise its flag, run every
token, stop at the closed queue, run the next published graph (a second ``fit``) once, and end when
its task stops.
"""
from __future__ import annotations

import json
import threading
import time

import tensorflow as tf

from strategies._shipped_steps import SHIPPED_FLAG, SHIPPED_MANIFEST, shipped_graph_name, shipped_steps_work
from tf_config.ports import pick_port

v1 = tf.compat.v1
_PS, _WORKER = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"


def _handle(name, dtype, device):
    with v1.device(device):
        return tf.raw_ops.VarHandleOp(dtype=dtype, shape=[], shared_name=name, container="")


def _steps_graph(queue_name):
    """What a chief ships: dequeue a token, add it to a counter on the ps, count ready workers."""
    graph = tf.Graph()
    with graph.as_default():
        with v1.device(_PS):
            token = tf.raw_ops.QueueDequeueV2(
                handle=tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]], shared_name=queue_name),
                component_types=[tf.int64])[0]
            counted = tf.raw_ops.AssignAddVariableOp(resource=_handle("counter", tf.int64, _PS), value=token)
            ready = tf.raw_ops.AssignAddVariableOp(resource=_handle("ready", tf.int64, _PS),
                                                   value=tf.constant(1, tf.int64))
        with v1.device(_WORKER):
            initializer = tf.no_op(name="initializer")
    fetches = {"token": token.name, "train": [counted.name], "initializer": initializer.name, "ready": ready.name}
    return graph.as_graph_def().SerializeToString(), fetches


def test_a_serving_worker_runs_each_shipped_graph_once_until_its_queue_closes():
    cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{pick_port()}"], "worker": [f"127.0.0.1:{pick_port()}"]})
    ps = tf.distribute.Server(cluster, job_name="ps", task_index=0)
    worker = tf.distribute.Server(cluster, job_name="worker", task_index=0)
    graph = tf.Graph()
    with graph.as_default():
        strings = tf.compat.v1.placeholder(tf.string, [])
        publish = {name: tf.raw_ops.AssignVariableOp(resource=_handle(name, tf.string, _PS), value=strings)
                   for name in (SHIPPED_MANIFEST, shipped_graph_name(0))}
        counter, ready = _handle("counter", tf.int64, _PS), _handle("ready", tf.int64, _PS)
        init = [tf.raw_ops.AssignVariableOp(resource=v, value=tf.constant(0, tf.int64)) for v in (counter, ready)]
        read = [tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.int64) for v in (counter, ready)]
        flag = tf.raw_ops.VarIsInitializedOp(resource=_handle(SHIPPED_FLAG, tf.int64, _WORKER))
        queues = {name: tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]], shared_name=name)
                  for name in ("tokens-1", "tokens-2")}
        tokens = tf.compat.v1.placeholder(tf.int64, [None])
        enqueue = {name: tf.raw_ops.QueueEnqueueManyV2(handle=q, components=[tokens]) for name, q in queues.items()}
        close = {name: tf.raw_ops.QueueCloseV2(handle=q) for name, q in queues.items()}
    session = v1.Session(ps.target, graph=graph)
    session.run(init)
    stop = threading.Event()
    ran = []
    thread = threading.Thread(target=lambda: ran.append(shipped_steps_work(0)(worker.target, stop)), daemon=True)
    thread.start()

    def ship(queue_name, fit_id):
        serialized, fetches = _steps_graph(queue_name)
        session.run(publish[shipped_graph_name(0)], {strings: serialized})
        session.run(publish[SHIPPED_MANIFEST], {strings: json.dumps({"id": fit_id, "fetches": fetches})})

    def wait_for(expected):
        deadline = time.monotonic() + 30
        while session.run(read) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return session.run(read)

    deadline = time.monotonic() + 30
    while not session.run(flag) and time.monotonic() < deadline:  # the worker says it takes shipped steps
        time.sleep(0.05)
    assert session.run(flag)
    ship("tokens-1", "fit-1")
    session.run(enqueue["tokens-1"], {tokens: [16, 16, 3]})
    assert wait_for([35, 1]) == [35, 1]  # every token's steps, one ready worker
    session.run(close["tokens-1"])  # the first fit ends
    time.sleep(1.5)  # the worker sees the same manifest again: it must not run that graph a second time
    assert session.run(read) == [35, 1]
    ship("tokens-2", "fit-2")  # a second fit of the same model
    session.run(enqueue["tokens-2"], {tokens: [5]})
    assert wait_for([40, 2]) == [40, 2]
    session.run(close["tokens-2"])
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive() and ran == [40]  # the steps of both graphs, and the work ended with its task
