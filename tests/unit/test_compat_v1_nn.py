"""``toolkit.compat.v1.nn.embedding_lookup``: each distinct id read once from a remote table; TF's values, updates."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import toolkit.compat.v1 as tf1
from toolkit.compat import _v1_nn

v1 = tf.compat.v1
IDS = np.random.RandomState(0).randint(0, 50, size=(64, 5)).astype(np.int64)


def _train(lookup, *, partitioned: bool = True, max_norm=None, again: bool = False):
    """Two lookups of the same ids (deep and wide), three Adagrad steps: (output, table after, op types, before).

    ``again``: the deep table is looked up a second time, with other ids (its gradients then add up).
    """
    graph = tf.Graph()
    with graph.as_default():
        part = v1.fixed_size_partitioner(2) if partitioned else None
        table = v1.get_variable("t", [50, 4], partitioner=part,
                                initializer=v1.random_normal_initializer(stddev=0.3, seed=3))
        wide = v1.get_variable("w", [50, 1], partitioner=part, initializer=v1.random_normal_initializer(seed=4))
        ids = tf.constant(IDS)
        deep = lookup(table, ids, max_norm=max_norm)
        loss = tf.reduce_sum(tf.square(deep)) + tf.reduce_sum(lookup(wide, ids))
        if again:
            loss += tf.reduce_sum(lookup(table, tf.constant(IDS[:, ::-1] // 2)))
        train = v1.train.AdagradOptimizer(0.1).minimize(loss)
        whole = tf.concat(list(table), 0) if partitioned else tf.identity(table)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            first, before = session.run([deep, whole])
            for _ in range(3):
                session.run(train)
            return first, session.run(whole), [op.type for op in graph.get_operations()], before


@pytest.mark.parametrize(("max_norm", "again"), [(None, False), (0.6, False), (None, True)])
def test_values_and_updates_equal_tensorflows(max_norm, again):
    theirs = _train(v1.nn.embedding_lookup, max_norm=max_norm, again=again)
    ours = _train(tf1.nn.embedding_lookup, max_norm=max_norm, again=again)
    assert ours[0].shape == (64, 5, 4)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=0, atol=1e-7)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)  # duplicates summed in another order
    assert np.abs(ours[1] - ours[3]).max() > 1e-3  # the table moved


def test_each_distinct_id_is_read_once_and_made_distinct_once_per_ids():
    ops = _train(tf1.nn.embedding_lookup)[2]
    tf_ops = _train(v1.nn.embedding_lookup)[2]
    # TF: the optimizer sums each of the 4 parts' duplicate rows on its ps (a Unique and a segment sum
    # each); here one Unique is shared by both tables' lookups and the parts' rows need no sum
    assert (tf_ops.count("Unique"), tf_ops.count("UnsortedSegmentSum")) == (4, 4)
    assert (ops.count("Unique"), ops.count("UnsortedSegmentSum")) == (1, 2)  # the worker's sum per lookup
    # a table looked up twice gets the two lookups' rows together: those are summed as TF sums them
    twice = _train(tf1.nn.embedding_lookup, again=True)[2]
    assert twice.count("Unique") == 2 + 2
    graph = tf.Graph()
    with graph.as_default():
        table = v1.get_variable("t", [50, 4], partitioner=v1.fixed_size_partitioner(2))
        tf1.nn.embedding_lookup(table, tf.constant(IDS))
        gathers = [op for op in graph.get_operations() if op.type == "ResourceGather"]
        assert len(gathers) == 2
        unique = next(op for op in graph.get_operations() if op.type == "Unique")
        # what each part gathers comes from the distinct ids, not from the batch's 320
        for gather in gathers:
            assert unique.name in _ancestors(gather.inputs[1].op)


def _ancestors(op, seen=None):
    seen = set() if seen is None else seen
    for tensor in op.inputs:
        if tensor.op.name not in seen:
            seen.add(tensor.op.name)
            _ancestors(tensor.op, seen)
    return seen


def test_a_local_table_and_eager_calls_are_tensorflows_lookup():
    ops = _train(tf1.nn.embedding_lookup, partitioned=False)[2]
    assert ops.count("Unique") == _train(v1.nn.embedding_lookup, partitioned=False)[2].count("Unique")
    table = tf.Variable(np.arange(20, dtype=np.float32).reshape(10, 2))
    np.testing.assert_array_equal(tf1.nn.embedding_lookup(table, [3, 3, 1]).numpy(), [[6, 7], [6, 7], [2, 3]])


def test_a_table_on_a_ps_job_counts_as_remote():
    graph = tf.Graph()
    with graph.as_default(), tf.device("/job:ps/task:0"):
        assert _v1_nn.remote_table(v1.get_variable("t", [10, 2]))
    with graph.as_default():
        assert not _v1_nn.remote_table(v1.get_variable("local", [10, 2]))


def test_the_rest_of_nn_is_tensorflows():
    assert tf1.nn.relu is v1.nn.relu
    assert "embedding_lookup_sparse" in dir(tf1.nn)


def test_ragged_ids_take_tensorflows_dispatch():
    graph = tf.Graph()
    with graph.as_default():
        table = v1.get_variable("t", [10, 2], partitioner=v1.fixed_size_partitioner(2))
        ids = tf.ragged.constant([[1, 2, 2], [7]], dtype=tf.int64)
        rows = tf1.nn.embedding_lookup(table, ids)
        assert isinstance(rows, tf.RaggedTensor)
        whole = tf.concat(list(table), 0)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            got, values = session.run([rows, whole])
            # TF's default "mod" strategy: id i is row i // 2 of part i % 2
            mod = [values[(i % 2) * 5 + i // 2] for i in (1, 2, 2, 7)]
            np.testing.assert_array_equal(np.concatenate(got.to_list()), mod)


def test_a_built_graph_is_not_kept_alive_by_what_the_lookup_memoises():
    import gc
    import weakref

    def build():
        graph = tf.Graph()
        with graph.as_default():
            table = v1.get_variable("t", [10, 2], partitioner=v1.fixed_size_partitioner(2))
            v1.train.AdagradOptimizer(0.1).minimize(tf.reduce_sum(tf1.nn.embedding_lookup(table, tf.constant([1, 1]))))
        return weakref.ref(graph)

    built = build()
    gc.collect()
    assert built() is None
