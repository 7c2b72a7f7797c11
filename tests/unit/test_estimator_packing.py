"""The between-graph step's transfers, packed: same values, fewer RPCs, no new cycles.

A ps server and a worker server run in this process (two ``tf.distribute.Server``s on
loopback ports), so the graphs really execute across two tasks: the partition graphs TF
ran say how many tensors crossed between them.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tf_config.ports import pick_ports
from toolkit._graph_packing import pack_transfers

v1 = tf.compat.v1
WORKER, PS = "/job:worker/task:0", "/job:ps/task:0"


@pytest.fixture(scope="module")
def cluster():
    ports = pick_ports(2)
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]})
    ps = tf.distribute.Server(spec, job_name="ps", task_index=0, start=True)
    worker = tf.distribute.Server(spec, job_name="worker", task_index=0, start=True)
    yield spec, worker.target
    del ps


def _mlp_step(spec, x, y):
    """TF1's between-graph MLP (3 dense layers, Adam, global step) as ``replica_device_setter`` places it."""
    with v1.device(v1.train.replica_device_setter(worker_device=WORKER, cluster=spec)):
        global_step = v1.train.get_or_create_global_step()
        net = tf.constant(x)
        for i, width in enumerate((16, 16, 1)):
            w = v1.get_variable(f"w{i}", [net.shape[1], width], initializer=v1.glorot_uniform_initializer(seed=i))
            b = v1.get_variable(f"b{i}", [width], initializer=v1.zeros_initializer())
            net = tf.matmul(net, w) + b
            net = tf.nn.relu(net) if i < 2 else net
        loss = tf.reduce_mean(tf.square(net - y))
        train_op = v1.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)
    return train_op, loss


def _crossing(metadata) -> int:
    """Tensors received from the other task in one step (``_Recv`` nodes not fed by the client)."""
    return sum(1 for graph in metadata.partition_graphs for node in graph.node
               if node.op == "_Recv" and not node.attr["client_terminated"].b)


def _train(cluster, *, pack: bool, steps: int = 5):
    spec, target = cluster
    rng = np.random.RandomState(0)
    x = rng.randn(32, 8).astype(np.float32)
    y = (x @ rng.randn(8, 1)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        train_op, loss = _mlp_step(spec, x, y)
        saved = pack_transfers(graph, [train_op, loss]) if pack else 0
        with v1.Session(target) as session:
            session.run(v1.global_variables_initializer())
            metadata = v1.RunMetadata()
            session.run(train_op, options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
            losses = [session.run([train_op, loss])[1] for _ in range(steps)]
            weights = session.run(v1.trainable_variables())
            global_step = session.run(v1.train.get_global_step())
    return saved, _crossing(metadata), losses, weights, global_step


def test_packed_step_trains_to_the_same_weights_with_fewer_transfers(cluster):
    _, plain_crossing, plain_losses, plain_weights, plain_step = _train(cluster, pack=False)
    saved, packed_crossing, packed_losses, packed_weights, packed_step = _train(cluster, pack=True)
    assert packed_step == plain_step == 6
    np.testing.assert_allclose(packed_losses, plain_losses, rtol=1e-5)
    for packed, plain in zip(packed_weights, plain_weights, strict=True):
        np.testing.assert_allclose(packed, plain, rtol=1e-5, atol=1e-7)
    # before: six reads ps -> worker, six gradients and Adam's four scalars worker -> ps; after: one each way
    assert (plain_crossing, saved, packed_crossing) == (16, 14, 2)


def test_a_read_ordered_after_the_update_stays_out_of_the_packed_reads(cluster):
    """A read that waits for the update cannot travel with the reads the update depends on."""
    spec, target = cluster
    with tf.Graph().as_default() as graph:
        with v1.device(PS):
            a = v1.get_variable("a", [4], initializer=v1.ones_initializer())
            b = v1.get_variable("b", [4], initializer=v1.ones_initializer())
            read_a, read_b = a.read_value(), b.read_value()
        with v1.device(WORKER):
            gradient = 2.0 * (read_a + read_b)
        with v1.device(PS):
            update = v1.assign_sub(a, gradient)
            with v1.control_dependencies([update]):
                after = a.read_value()
        with v1.device(WORKER):
            report = after * 1.0
        saved = pack_transfers(graph, [report])
        packed = [op for op in graph.get_operations() if op.type == "ConcatV2"]
        with v1.Session(target) as session:
            session.run(v1.global_variables_initializer())
            result = session.run(report)
    # {read_a, read_b} travel together; `after` (which waits for the update, which waits for
    # the worker's use of read_a and read_b) stays on its own: with it the step would deadlock
    assert saved == 1 and len(packed) == 1
    assert {t.op.name for t in packed[0].inputs[:-1]} == {"tfdist_packed/Reshape", "tfdist_packed/Reshape_1"}
    assert {t.op.inputs[0].op.name for t in packed[0].inputs[:-1]} == {read_a.op.name, read_b.op.name}
    np.testing.assert_allclose(result, [-3.0] * 4)


def _step_read_crossings(cluster, *, colocated: bool) -> tuple[int, int]:
    """(value, tensors crossed) fetching the global-step read the step hooks fetch, the step on the ps."""
    from tensorflow.python.training import training_util

    from toolkit._compat.tensorflow import colocated_global_step_read

    spec, target = cluster
    with tf.Graph().as_default() as graph:
        with v1.device(v1.train.replica_device_setter(worker_device=WORKER, cluster=spec)):
            v1.train.get_or_create_global_step()
        if colocated:
            colocated_global_step_read(graph)
        with v1.device(WORKER):  # where a hook's begin() builds it when nothing did before
            read = training_util._get_or_create_global_step_read(graph)
        with v1.Session(target) as session:
            session.run(v1.global_variables_initializer())
            metadata = v1.RunMetadata()
            value = session.run(read, options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    return int(value), _crossing(metadata)


def test_the_step_hooks_global_step_read_crosses_once(cluster):
    assert _step_read_crossings(cluster, colocated=True) == (0, 1)
    value, theirs = _step_read_crossings(cluster, colocated=False)  # TF's: a cond split across the tasks
    assert value == 0 and theirs > 1


def test_the_estimator_builds_the_step_read_beside_the_global_step(tmp_path):
    from tensorflow.python.training import training_util

    from toolkit.estimator import Estimator, EstimatorSpec

    seen = []

    class Probe(v1.train.SessionRunHook):
        def begin(self):
            (read,) = v1.get_collection(training_util.GLOBAL_STEP_READ_KEY)
            seen.append([op.colocation_groups() for op in (read.op, read.op.inputs[0].op)])

    def model_fn(features, labels, mode):
        weight = v1.get_variable("w", [], initializer=v1.zeros_initializer())
        loss = tf.square(weight - 1.0)
        return EstimatorSpec(mode, loss=loss, train_op=v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=v1.train.get_global_step()))

    Estimator(model_fn, model_dir=str(tmp_path)).train(lambda: (tf.zeros([1]), tf.zeros([1])), steps=1,
                                                       hooks=[Probe()])
    assert seen == [[[b"loc:@global_step"], [b"loc:@global_step"]]]


def test_rows_of_unknown_count_travel_in_the_packed_tensor_with_their_count(cluster):
    """A lookup's rows ([?, 4] and [?, 1], float32 and float64) and a weight cross in one tensor per dtype."""
    spec, target = cluster
    rng = np.random.RandomState(1)
    table, weight = rng.randn(50, 4).astype(np.float32), rng.randn(3, 2).astype(np.float32)
    wide = rng.randn(50, 1)
    for pack in (False, True):
        with tf.Graph().as_default() as graph:
            ids = v1.placeholder(tf.int64, [None])
            with v1.device(PS):
                rows, wide_rows = tf.gather(tf.constant(table), ids), tf.gather(tf.constant(wide), ids)
                w = v1.get_variable("w", initializer=weight).read_value()
            with v1.device(WORKER):
                out = [tf.reduce_sum(rows, axis=1), tf.reduce_sum(wide_rows, axis=1), tf.reduce_sum(w)]
            saved = pack_transfers(graph, out) if pack else 0
            with v1.Session(target) as session:
                session.run(v1.global_variables_initializer())
                metadata = v1.RunMetadata()
                got = session.run(out, {ids: [3, 7, 7, 49, 0]}, options=v1.RunOptions(output_partition_graphs=True),
                                  run_metadata=metadata)
                empty = session.run(out, {ids: []})
        # the ids to the ps; back: float32 rows and weight in one tensor (packed), float64 rows alone
        assert (saved, _crossing(metadata)) == ((1, 3) if pack else (0, 4))
        np.testing.assert_allclose(got[0], table[[3, 7, 7, 49, 0]].sum(axis=1), rtol=1e-6)
        np.testing.assert_allclose(got[1], wide[[3, 7, 7, 49, 0], 0])
        np.testing.assert_allclose(got[2], weight.sum(), rtol=1e-6)
        assert empty[0].shape == (0,) and empty[1].shape == (0,)
