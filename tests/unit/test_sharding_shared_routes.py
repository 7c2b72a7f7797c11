"""Two tables of one layout looked up with the same ids (a wide & deep model) route those ids once."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from strategies.sharding import ShardedTable


def _tables():
    import keras

    init = keras.initializers.RandomUniform(-1.0, 1.0, seed=5)
    deep = ShardedTable.create("deep", 1000, 4, initializer=init, num_shards=2, partition="div")
    wide = ShardedTable.create("wide", 1000, 1, initializer=init, num_shards=2, partition="div")
    other = ShardedTable.create("other", 999, 1, initializer=init, num_shards=2, partition="div")
    return deep, wide, other


def test_tables_of_one_layout_share_the_routing_of_the_same_ids_and_still_return_their_own_rows():
    deep, wide, other = _tables()
    ids = np.array([[3, 998, 3], [500, 0, 499]], np.int64)

    @tf.function
    def lookups(batch):
        return deep.lookup(batch), wide.lookup(batch), other.lookup(batch), wide.lookup(batch + 0)

    graph = lookups.get_concrete_function(tf.TensorSpec([None, 3], tf.int64)).graph
    types = [op.type for op in graph.get_operations()]
    # deep and wide share one Unique (same ids, same layout); `other` (999 rows) and `batch + 0` have their own
    assert types.count("Unique") == 3, types
    assert "FloorDiv" not in types and "FloorMod" not in types, "the div route divides again"
    got = lookups(tf.constant(ids))
    for table, rows in zip((deep, wide, other, wide), got, strict=True):
        np.testing.assert_array_equal(rows.numpy(), table.to_numpy()[ids])


def test_the_shared_routing_does_not_keep_traced_graphs_alive():
    """The routing cache lives on each graph: a graph traced for a lookup (every fit, every validation traces new
    ones) is freed with its function, not kept for the process's life by the cache's tensors."""
    import gc
    import weakref

    deep, wide, _ = _tables()

    def traced():
        lookups = tf.function(lambda batch: (deep.lookup(batch), wide.lookup(batch)))
        graph = lookups.get_concrete_function(tf.TensorSpec([None, 3], tf.int64)).graph
        assert [op.type for op in graph.get_operations()].count("Unique") == 1  # still shared within the graph
        return weakref.ref(graph)

    graphs = [traced() for _ in range(3)]
    gc.collect()
    assert [graph() for graph in graphs] == [None, None, None]
