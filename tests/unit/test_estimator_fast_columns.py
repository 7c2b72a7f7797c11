"""The canned estimators' packed lookups equal TF's feature columns: values, gradients, variables, errors."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator.canned._fast_columns import fast_input_layer, fast_linear_logits

v1 = tf.compat.v1
fc = v1.feature_column
_KEYS = [f"C{i}" for i in (1, 2, 10)]  # C1 and C10: TF's cols_to_vars lists C10's variables under C1's prefix


def _features(ids: np.ndarray) -> dict[str, tf.Tensor]:
    features = {key: tf.constant(ids[:, i:i + 1]) for i, key in enumerate(_KEYS)}
    features["dense"] = tf.constant(np.arange(len(ids) * 2, dtype=np.float32).reshape(-1, 2))
    return features


def _both(build, ids: np.ndarray, partitions: int = 2, features=_features):
    """(stock, fast) outputs and their gradients w.r.t. every variable, each in a fresh graph from one seed.

    Also returns the fast graph's number of per-part packed gathers (``ResourceGather`` outside TF's
    ops), so a test knows the packed path was taken rather than TF's.
    """
    results = []
    for fast in (False, True):
        with tf.Graph().as_default() as graph:
            v1.set_random_seed(0)
            with v1.variable_scope("m", partitioner=v1.fixed_size_partitioner(partitions)):
                out = build(features(ids), fast)
            variables = sorted(v1.trainable_variables(), key=lambda v: v.op.name)
            grads = tf.gradients(tf.reduce_sum(out * tf.range(1.0, 1.0 + out.shape[-1])), variables)
            packed = sum(op.type == "ResourceGather" and "input_layer" not in op.name and "linear_model" not in op.name
                 for op in graph.get_operations())
            with v1.Session() as session:
                session.run([v1.global_variables_initializer(), v1.tables_initializer()])
                for v in variables:  # non-zero weights so that the linear sums are not trivially zero
                    session.run(v.assign(tf.reshape(tf.range(float(np.prod(v.shape))), v.shape) / 7.0))
                dense_grads = [tf.convert_to_tensor(g) for g in grads]
                results.append((session.run(out), [v.op.name for v in variables], session.run(dense_grads)))
    return results, packed


def test_embedding_columns_look_up_the_rows_tf_does_with_the_same_variables_and_gradients():
    ids = np.array([[0, 3, 5], [7, -1, 2], [4, 4, 8], [9, 0, 1]], np.int64)
    columns = [fc.numeric_column("dense", shape=(2,))] + [
        fc.embedding_column(fc.categorical_column_with_identity(k, 10), 3) for k in _KEYS]

    def build(features, fast):
        return fast_input_layer(features, columns) if fast else fc.input_layer(features, columns)

    ((stock, names, stock_grads), (packed, fast_names, fast_grads)), gathers = _both(build, ids)
    assert gathers == 3 * 2
    assert names == fast_names and "m/input_layer/C10_embedding/embedding_weights/part_1" in names
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    assert np.all(packed[1, 6:9] == 0)  # C2 (after C10, C1 by name) is missing (-1): zeros, as TF reads it
    for a, b in zip(fast_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_columns_joined_in_tf_s_order_take_their_packed_rows_without_a_split():
    """input_layer joins columns by name: packed columns with another between them, and two widths."""
    def features(_):
        found = {k: tf.constant(np.array([[1], [4], [1]], np.int64) + i) for i, k in enumerate("acd")}
        found["b"] = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
        return found

    def columns():  # by name: a_embedding, b, c_embedding, d_embedding
        ids = {k: fc.categorical_column_with_identity(k, 10) for k in "dca"}
        return [fc.embedding_column(ids["d"], 2), fc.embedding_column(ids["c"], 3), fc.numeric_column("b", shape=(2,)),
                fc.embedding_column(ids["a"], 3)]

    def build(features, fast):
        return fast_input_layer(features, columns()) if fast else fc.input_layer(features, columns())

    ((stock, names, stock_grads), (packed, fast_names, fast_grads)), gathers = _both(build, None, features=features)
    assert gathers == 3 * 2 and names == fast_names and packed.shape == (3, 3 + 2 + 3 + 2)
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    for a, b in zip(fast_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with tf.Graph().as_default() as graph, v1.variable_scope("m", partitioner=v1.fixed_size_partitioner(2)):
        fast_input_layer(_features(np.array([[0, 3, 5], [7, 1, 2]], np.int64)), [
            fc.embedding_column(fc.categorical_column_with_identity(k, 10), 3) for k in _KEYS])
        cuts = [op.type for op in graph.get_operations() if "input_layer" not in op.name
                and op.type in ("Split", "SplitV", "StridedSlice", "Slice") and op.outputs[0].dtype == tf.float32]
    # adjacent columns of one width: their slots are joined as they come, not cut per column first
    assert cuts == []


def test_linear_model_over_identity_columns_sums_the_weights_tf_does():
    ids = np.array([[0, 3, 5], [7, -1, 2], [4, 4, 8]], np.int64)
    columns = [fc.categorical_column_with_identity(k, 10) for k in _KEYS]

    def build(features, fast):
        if fast:
            return fast_linear_logits(features, columns, units=1, sparse_combiner="sum")
        return fc.linear_model(features, columns, units=1, sparse_combiner="sum")

    ((stock, names, stock_grads), (packed, fast_names, fast_grads)), gathers = _both(build, ids)
    assert gathers == 3 * 2
    assert names == fast_names and "m/linear_model/C1/weights/part_0" in names
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    for a, b in zip(fast_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize(("c1", "c2", "named"), [([3, 12], [1, 2], ("C1", 10)), ([3, 4], [-1, 20], ("C2", 20)),
                                                 ([3, -2], [1, 2], ("C1", 10))])
def test_an_id_outside_the_identity_column_is_refused_naming_the_feature(c1, c2, named):
    """One check for all the columns; its error names the column whose id is outside (-1 is missing, not outside)."""
    columns = [fc.embedding_column(fc.categorical_column_with_identity("C1", 10), 2),
               fc.embedding_column(fc.categorical_column_with_identity("C2", 20), 2)]
    with tf.Graph().as_default():
        out = fast_input_layer({"C1": tf.constant([[c1[0]], [c1[1]]], tf.int64),
                                "C2": tf.constant([[c2[0]], [c2[1]]], tf.int64)}, columns)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=rf"feature {named[0]} has an id outside \[0, {named[1]}\), the num_buckets of its "
                                     r"categorical_column_with_identity\. Map the ids into that range"):
                session.run(out)


def test_missing_ids_pass_the_check_and_look_up_zeros():
    columns = [fc.embedding_column(fc.categorical_column_with_identity("C1", 10), 2),
               fc.embedding_column(fc.categorical_column_with_identity("C2", 20), 2)]
    with tf.Graph().as_default():
        out = fast_input_layer({"C1": tf.constant([[-1], [9]], tf.int64), "C2": tf.constant([[19], [-1]], tf.int64)},
                               columns)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            rows = session.run(out)
    assert not rows[0, :2].any() and rows[0, 2:].any() and rows[1, :2].any() and not rows[1, 2:].any()


def test_multivalent_or_sparse_ids_take_tf_s_own_path():
    columns = [fc.embedding_column(fc.categorical_column_with_identity("C1", 10), 2, combiner="sum")]
    with tf.Graph().as_default():
        out = fast_input_layer({"C1": tf.constant([[3, 4], [1, 2]], tf.int64)}, columns)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            table = session.run(v1.trainable_variables()[0])
            np.testing.assert_allclose(session.run(out), [table[3] + table[4], table[1] + table[2]], rtol=1e-6)


def _transformed_columns(vocabulary_file):
    return [fc.categorical_column_with_hash_bucket("H", 7),
            fc.categorical_column_with_hash_bucket("I", 5, dtype=tf.int64),
            fc.categorical_column_with_vocabulary_list("V", ["a", "b", "c", "d"], num_oov_buckets=2),
            fc.categorical_column_with_vocabulary_list("W", [10, 20, 30], dtype=tf.int64),
            fc.categorical_column_with_vocabulary_file("F", str(vocabulary_file), vocabulary_size=3,
                                                       num_oov_buckets=1)]


def _mixed_features(rows):
    """Strings and ints per example, with missing values ('' and -1) and ids outside each vocabulary."""
    del rows
    return {"H": tf.constant([["x"], [""], ["y"], ["x"]]), "I": tf.constant([[3], [-1], [12345], [7]], tf.int64),
            "V": tf.constant([["b"], ["zz"], ["a"], ["d"]]), "W": tf.constant([[20], [99], [10], [30]], tf.int64),
            "F": tf.constant([["pear"], ["fig"], ["kiwi"], ["apple"]]),
            "C1": tf.constant([[0], [3], [5], [9]], tf.int64), "C2": tf.constant([[7], [-1], [2], [0]], tf.int64)}


@pytest.mark.parametrize("kind", ["embedding", "shared"])
def test_hashed_vocabulary_and_shared_embedding_columns_look_up_packed_as_tf_does(tmp_path, kind):
    vocabulary = tmp_path / "fruit.txt"
    vocabulary.write_text("apple\npear\nfig\n")
    def make_columns():  # TF makes shared embedding columns in graph mode only
        if kind == "embedding":
            return [fc.embedding_column(c, 3) for c in _transformed_columns(vocabulary)]
        # one table for C1 and C2, one for both hashed string columns
        return [*fc.shared_embedding_columns([fc.categorical_column_with_identity("C1", 10),
                                              fc.categorical_column_with_identity("C2", 10)], 3),
                *fc.shared_embedding_columns([fc.categorical_column_with_hash_bucket("H", 7),
                                              fc.categorical_column_with_hash_bucket("V", 7)], 2)]

    tables = 5 if kind == "embedding" else 4  # lookups: one per column

    def build(features, fast):
        columns = make_columns()
        return fast_input_layer(features, columns) if fast else fc.input_layer(features, columns)

    ((stock, names, stock_grads), (packed, fast_names, fast_grads)), gathers = _both(build, None,
                                                                                    features=_mixed_features)
    assert gathers == tables * 2 and names == fast_names
    if kind == "shared":
        assert names == ["m/input_layer/C1_C2_shared_embedding/embedding_weights/part_0",
                         "m/input_layer/C1_C2_shared_embedding/embedding_weights/part_1",
                         "m/input_layer/H_V_shared_embedding/embedding_weights/part_0",
                         "m/input_layer/H_V_shared_embedding/embedding_weights/part_1"]
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    assert np.count_nonzero(np.all(packed == 0, axis=1)) == 0 and np.any(packed == 0)  # missing values read zeros
    for a, b in zip(fast_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_linear_model_over_hashed_and_vocabulary_columns_sums_the_weights_tf_does(tmp_path):
    vocabulary = tmp_path / "fruit.txt"
    vocabulary.write_text("apple\npear\nfig\n")
    columns = _transformed_columns(vocabulary)

    def build(features, fast):
        if fast:
            return fast_linear_logits(features, columns, units=2, sparse_combiner="sum")
        return fc.linear_model(features, columns, units=2, sparse_combiner="sum")

    ((stock, names, stock_grads), (packed, fast_names, fast_grads)), gathers = _both(build, None,
                                                                                    features=_mixed_features)
    assert gathers == 5 * 2 and names == fast_names and "m/linear_model/F/weights/part_1" in names
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    for a, b in zip(fast_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _wide_and_deep():
    """The identity columns of ``_KEYS`` (wide) and a 2-wide embedding of each (deep)."""
    wide = [fc.categorical_column_with_identity(k, 10) for k in _KEYS]
    return wide, [fc.embedding_column(c, 2) for c in wide]


def test_deep_and_wide_parts_share_one_id_check_and_routing_and_equal_tf():
    ids = np.array([[0, 3, 5], [7, -1, 2], [4, 4, 8]], np.int64)
    wide, deep = _wide_and_deep()

    def build(features, fast):
        if fast:
            parts = [fast_input_layer(features, deep),
                     fast_linear_logits(features, wide, units=1, sparse_combiner="sum")]
        else:
            parts = [fc.input_layer(features, deep), fc.linear_model(features, wide, units=1, sparse_combiner="sum")]
        return tf.concat(parts, axis=1)

    ((stock, names, stock_grads), (packed, fast_names, fast_grads)), gathers = _both(build, ids)
    assert gathers == 2 * 3 * 2 and names == fast_names
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    for a, b in zip(fast_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with tf.Graph().as_default() as graph, v1.variable_scope("m", partitioner=v1.fixed_size_partitioner(2)):
        grads = tf.gradients(tf.reduce_sum(build(_features(ids), True)), v1.trainable_variables())
        kinds = [op.type for op in graph.get_operations()  # the packed path's own ops, not TF's unused ones
                 if "input_layer" not in op.name and "linear_model" not in op.name]
    # each part's gradient is its rows' IndexedSlices, without TF's per-part reshapes (ExpandDims, Size, ...)
    assert sum(isinstance(g, tf.IndexedSlices) for g in grads) == 2 * 3 * 2
    assert kinds.count("ExpandDims") == 0 and kinds.count("VariableShape") == 2 * 3 * 2
    assert kinds.count("Unique") == 1  # one routing per ps (one device here), shared by both tables
    assert kinds.count("Assert") == 1  # one id check, for every feature at once


def test_a_built_graph_is_not_kept_alive_by_the_memoised_ids():
    import gc
    import weakref

    columns = [fc.embedding_column(fc.categorical_column_with_identity("C1", 10), 2)]
    graphs = []
    for _ in range(2):  # as an Estimator builds a graph per call
        graph = tf.Graph()
        with graph.as_default():
            fast_input_layer({"C1": tf.constant([[3], [1]], tf.int64)}, columns)
        graphs.append(weakref.ref(graph))
        del graph
    gc.collect()
    assert graphs[0]() is None


def test_adagrad_updates_each_distinct_row_once_as_tf_s_sparse_update_does():
    from toolkit._compat.tensorflow import distinct_row_updates

    ids = np.array([[0, 3, 5], [7, 3, 2], [0, 3, 8], [7, -1, 5]], np.int64)  # repeated ids in every column
    wide, deep = _wide_and_deep()
    found = []
    for fast in (False, True):
        with tf.Graph().as_default() as graph:
            v1.set_random_seed(0)
            with v1.variable_scope("m", partitioner=v1.fixed_size_partitioner(2)):
                features = _features(ids)
                if fast:
                    out = fast_input_layer(features, deep) @ tf.ones([6, 1]) + fast_linear_logits(
                        features, wide, units=1, sparse_combiner="sum")
                else:
                    out = fc.input_layer(features, deep) @ tf.ones([6, 1]) + fc.linear_model(
                        features, wide, units=1, sparse_combiner="sum")
            loss = tf.reduce_sum(out * tf.range(1.0, 5.0)[:, None])
            optimizer = v1.train.AdagradOptimizer(0.5, initial_accumulator_value=0.1)
            before = len(graph.get_operations())
            distinct_row_updates()
            train = optimizer.minimize(loss, colocate_gradients_with_ops=True)
            kinds = [op.type for op in graph.get_operations()[before:]]
            variables = sorted(v1.global_variables(), key=lambda v: v.op.name)  # tables and accumulators
            with v1.Session() as session:
                session.run(v1.global_variables_initializer())
                for _ in range(2):
                    session.run(train)
                found.append(([v.op.name for v in variables], session.run(variables), kinds))
    (names, stock, _), (fast_names, packed, kinds) = found
    assert names == fast_names and "m/linear_model/C10/weights/part_1/Adagrad" in names
    for a, b in zip(packed, stock, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # TF sums each part's duplicate rows (a Unique per part); the packed parts' rows are distinct already
    assert kinds.count("Unique") == 0 and kinds.count("ResourceSparseApplyAdagrad") == 2 * 3 * 2


def _alternating_cpus():
    """A device function: each variable part on the next of two CPUs, as ``replica_device_setter`` puts them on ps."""
    placed = iter(range(1000))

    def place(op):
        return f"/device:CPU:{next(placed) % 2}" if op.type == "VarHandleOp" else op.device

    return place


def test_parts_on_two_devices_are_routed_to_the_device_that_holds_them():
    ids = np.array([[0, 3, 5], [7, -1, 2], [4, 4, 8], [9, 0, 9]], np.int64)
    wide, deep = _wide_and_deep()
    found = []
    for fast in (False, True):
        with tf.Graph().as_default() as graph:
            v1.set_random_seed(0)
            with v1.device(_alternating_cpus()), v1.variable_scope("m", partitioner=v1.fixed_size_partitioner(2)):
                features = _features(ids)
                if fast:
                    out = tf.concat([fast_input_layer(features, deep),
                                     fast_linear_logits(features, wide, units=1, sparse_combiner="sum")], 1)
                else:
                    out = tf.concat([fc.input_layer(features, deep),
                                     fc.linear_model(features, wide, units=1, sparse_combiner="sum")], 1)
            variables = sorted(v1.trainable_variables(), key=lambda v: v.op.name)
            grads = [tf.convert_to_tensor(g) for g in tf.gradients(tf.reduce_sum(out * tf.range(1.0, 8.0)), variables)]
            devices = {v.device[-1] for v in variables}
            splits = sum(op.type == "DynamicPartition" and op.device.endswith(("CPU:0", "CPU:1"))
                         for op in graph.get_operations())
            with v1.Session(config=v1.ConfigProto(device_count={"CPU": 2})) as session:
                session.run(v1.global_variables_initializer())
                for v in variables:
                    session.run(v.assign(tf.reshape(tf.range(float(np.prod(v.shape))), v.shape) / 7.0))
                found.append((session.run(out), session.run(grads)))
    assert devices == {"0", "1"} and splits >= 2  # each device splits its own keys by part
    (stock, stock_grads), (packed, packed_grads) = found
    np.testing.assert_allclose(packed, stock, rtol=1e-6)
    for a, b in zip(packed_grads, stock_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
