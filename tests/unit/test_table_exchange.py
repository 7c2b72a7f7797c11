"""Tables looked up with the same ids exchange their rows and row gradients with each ps as one tensor.

A worker graph (two in-process servers: a ps and a worker) looks up a deep and a wide table with the
same ids, trains both with ``SparseAdagrad``, and has its gathers packed (``pack_table_reads``): the
tables and accumulators after two steps equal the same steps run in one process, unpacked, and a
step moves one rows tensor and one gradient tensor per shard (plus the routed ids), not one per table.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from _inprocess import ps_and_worker_target

from strategies.sharding import ShardedTable, ShardLayout
from toolkit.layers import SparseAdagrad
from toolkit.training.table_packing import pack_table_reads

v1 = tf.compat.v1
PS, WORKER = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
ROWS, DIMS = 40, {"deep": 4, "wide": 1}
IDS = np.array([[3, 7, 3, 25], [39, 7, 0, 21], [22, 3, 19, 20]], np.int64)  # repeats, both shards


@pytest.fixture(scope="module")
def cluster():
    return ps_and_worker_target()


def _initial() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {name: rng.normal(size=(ROWS, dim)).astype(np.float32) for name, dim in DIMS.items()}


def _loss(tables, ids):
    deep, wide = (tables[name].lookup(ids) for name in DIMS)
    return tf.reduce_sum(tf.tanh(deep) * tf.range(1.0, 5.0)) + tf.reduce_sum(wide * wide)


def _tables(devices):
    return {name: ShardedTable.create(name, ROWS, dim, initializer=keras.initializers.Zeros(), devices=devices)
            for name, dim in DIMS.items()}


def _step(tables, optimizer, ids):
    with tf.GradientTape() as tape:
        loss = _loss(tables, ids)
    shards = {name: list(table.shards) for name, table in tables.items()}
    gradients = tape.gradient(loss, shards)
    optimizer.apply([(tables[name], gradients[name]) for name in DIMS])


def _reference(initial, steps):
    tables = _tables(["/cpu:0", "/cpu:0"])
    for name, table in tables.items():
        table.assign_from([initial[name]], layout=ShardLayout("div", ROWS, 1))
    optimizer = SparseAdagrad(0.5).build(tables.values())
    for _ in range(steps):
        _step(tables, optimizer, tf.constant(IDS))
    return {name: (table.to_numpy(), optimizer.slots[name]["accumulator"].to_numpy())
            for name, table in tables.items()}


def _received(metadata) -> list[str]:
    return [node.attr["tensor_name"].s.decode() for graph_def in metadata.partition_graphs
            for node in graph_def.node if node.op == "_Recv" and not node.attr["client_terminated"].b]


def test_packed_exchange_trains_both_tables_as_one_process_does(cluster):
    initial = _initial()
    graph = tf.Graph()
    with graph.as_default():
        with v1.device(WORKER):
            with v1.device(PS):  # two shards of each table on the ps, as a worker opens the chief's
                tables = {name: ShardedTable([tf.Variable(initial[name][i * 20:(i + 1) * 20]) for i in range(2)],
                                             layout=ShardLayout("div", ROWS, 2), name=name) for name in DIMS}
                optimizer = SparseAdagrad(0.5).build(tables.values())
            ids = tf.constant(IDS)
            _step(tables, optimizer, ids)
            train = tf.group(*[op for op in graph.get_operations() if op.type == "ResourceSparseApplyAdagradV2"])
        assert pack_table_reads(graph) == 2  # one gather fewer per shard
        init = v1.global_variables_initializer()
    metadata = v1.RunMetadata()
    with v1.Session(cluster, graph=graph) as session:
        session.run(init)
        session.run(train, options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
        session.run(train)
        got = session.run({name: (list(table.shards), list(optimizer.slots[name]["accumulator"].shards))
                           for name, table in tables.items()})
    want = _reference(initial, steps=2)
    for name in DIMS:
        np.testing.assert_allclose(np.concatenate(got[name][0]), want[name][0], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(np.concatenate(got[name][1]), want[name][1], rtol=1e-6, err_msg=name)
    # per shard: its routed ids to the ps, both tables' rows back as one tensor, both gradients as one
    received = _received(metadata)
    assert len(received) == 3 * 2, received
