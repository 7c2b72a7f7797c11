"""tfdist's native kernels (``strategies._native``): TF's sparse Adagrad update and row sums bit for bit, used only
where probed."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import tensorflow as tf

from strategies import _native as native

LOCAL = "/job:localhost/replica:0/task:0/device:CPU:0"


@pytest.fixture(scope="module")
def module():
    loaded = native.load()
    if loaded is None:
        pytest.skip("tfdist's native kernels could not be built here (no C++ compiler?); TensorFlow's kernels run")
    return loaded


def _update(apply, table, indices, grads, accum0=0.1):
    var = tf.Variable(table)
    accum = tf.Variable(np.full(table.shape, accum0, table.dtype))
    for grad in grads:
        apply(var=var.handle, accum=accum.handle, lr=tf.constant(0.05, table.dtype),
              epsilon=tf.constant(1e-7, table.dtype), grad=tf.constant(grad), indices=tf.constant(indices))
    return var.numpy(), accum.numpy()


def _tf_apply(**kwargs):
    return tf.raw_ops.ResourceSparseApplyAdagradV2(use_locking=True, **kwargs)


@pytest.mark.parametrize("width", [1, 16, 5])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_updates_equal_tensorflows_fused_kernel_bit_for_bit(module, width, index_dtype, dtype):
    rng = np.random.RandomState(width)
    table = rng.normal(0, 0.1, (300, width)).astype(dtype)
    indices = rng.randint(0, 300, 120).astype(index_dtype)  # with repeats: applied in order, as TF's kernel does
    grads = [rng.normal(0, 1, (120, width)).astype(dtype) for _ in range(3)]
    theirs = _update(_tf_apply, table, indices, grads)
    ours = _update(native.sparse_apply_adagrad, table, indices, grads)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert not np.array_equal(ours[0], table)


def test_an_index_outside_the_table_is_an_error_naming_it(module):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"index 7 at position 1 is not in \[0, 4\)"):
        _update(native.sparse_apply_adagrad, np.zeros((4, 2), np.float32), np.array([0, 7]),
                [np.ones((2, 2), np.float32)])


def test_a_gradient_of_the_wrong_shape_is_an_error(module):
    with pytest.raises(tf.errors.InvalidArgumentError, match="grad must be"):
        _update(native.sparse_apply_adagrad, np.zeros((4, 2), np.float32), np.array([0, 1]),
                [np.ones((2, 3), np.float32)])


@pytest.mark.parametrize("width", [1, 16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sums_equal_tensorflows_unsorted_segment_sum_bit_for_bit(module, width, index_dtype, dtype):
    rng = np.random.RandomState(width)
    data = rng.normal(0, 1, (2000, width)).astype(dtype)
    ids = rng.zipf(1.3, 2000).astype(index_dtype) % 700  # repeats, as a click-through batch's positions
    ids[::97] = -1  # dropped, as TF drops them
    for segments in (700, np.int64(703)):
        ours = native.row_sum(tf.constant(data), tf.constant(ids), segments).numpy()
        np.testing.assert_array_equal(ours, tf.math.unsorted_segment_sum(data, ids, segments).numpy())
    assert ours.shape == (703, width)


def test_a_row_sum_segment_past_the_end_is_an_error_naming_it(module):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"segment_ids\[1\] = 5 is out of range \[0, 3\)"):
        native.row_sum(tf.ones([2, 4]), tf.constant([0, 5]), 3)


def test_a_lookups_gradient_is_summed_natively_only_on_a_probed_task(module):
    from toolkit._rows import expand_rows

    assert native.probe([LOCAL]) == [LOCAL]
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    positions = np.array([3, 0, 3, 1, 3, 0], np.int32)
    found = []
    for tasks in ([LOCAL], []):
        graph = tf.Graph()
        with graph.as_default(), native.kernels_on(tasks), tf.device(LOCAL):
            source = tf.constant(rows)
            out = expand_rows(source, tf.constant(positions))
            (grad,) = tf.gradients(out * tf.reshape(tf.range(1.0, 19.0) / 7.0, [6, 3]), [source])
            with tf.compat.v1.Session(graph=graph) as session:
                found.append((session.run([out, grad]), {op.type for op in graph.get_operations()}))
    (ours, ours_ops), (theirs, their_ops) = found
    assert "TfdistRowSum" in ours_ops and "UnsortedSegmentSum" not in ours_ops
    assert "TfdistRowSum" not in their_ops and "UnsortedSegmentSum" in their_ops
    np.testing.assert_array_equal(ours[0], rows[positions])
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert ours[1][2].tolist() == [0, 0, 0] and ours[1][3].sum() > 0  # row 2 unread, row 3 read three times


def test_probe_answers_per_task_and_the_kernel_is_used_only_inside_kernels_on(module):
    from toolkit.layers.sparse_optimizers import SparseAdagrad

    assert native.probe([LOCAL]) == [LOCAL]
    assert native.probe(["/job:ps/replica:0/task:3"]) == []  # no such task: TensorFlow's kernel there

    def op_types(tasks):
        graph = tf.Graph()
        with graph.as_default(), native.kernels_on(tasks), tf.device(LOCAL):
            shard, accum = tf.Variable(tf.zeros([10, 4])), tf.Variable(tf.fill([10, 4], 0.1))
            SparseAdagrad(0.05)._update_rows(shard, tf.constant([1, 2], tf.int64), tf.ones([2, 4]),
                                             {"accumulator": accum}, tf.constant(1))
        return {op.type for op in graph.get_operations()}

    assert "TfdistSparseApplyAdagrad" in op_types([LOCAL])
    assert "TfdistSparseApplyAdagrad" not in op_types([])
    assert "ResourceSparseApplyAdagradV2" in op_types([])
    assert not native.usable_on(LOCAL)  # outside kernels_on


def test_probe_through_a_session_on_a_server(module):
    import portpicker

    ports = [portpicker.pick_unused_port() for _ in range(2)]
    cluster = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"]})
    worker = tf.distribute.Server(cluster, job_name="worker", task_index=0)
    tf.distribute.Server(cluster, job_name="ps", task_index=0)
    ps0, ps1 = "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"
    assert native.probe([ps0, ps1], worker.target) == [ps0]  # the cluster has no ps 1


def test_switched_off_or_an_unsafe_directory_means_tensorflows_kernels(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "_loaded", {})  # this process's loaded library comes back after the test
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.load() is None
    native._loaded.clear()
    monkeypatch.delenv(native.ENV_SWITCH)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv(native.ENV_DIR, str(shared))
    assert native.load() is None
    assert "writable by others" in caplog.text and "TensorFlow's own kernels run instead" in caplog.text
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o777 and not list(shared.iterdir())  # nothing written there


def _tf1_adagrad_rows(tasks):
    """Three TF1 AdagradOptimizer steps on a table's looked-up rows: (table after, the graph's op types)."""
    from toolkit._compat.tensorflow import native_tf1_adagrad

    native_tf1_adagrad()
    v1 = tf.compat.v1
    graph = tf.Graph()
    rng = np.random.RandomState(0)
    with graph.as_default(), native.kernels_on(tasks):
        with tf.device(LOCAL):
            table = v1.get_variable("t", initializer=rng.normal(0, 0.1, (50, 16)).astype(np.float32),
                                    use_resource=True)
        rows = tf.gather(table, tf.constant(rng.randint(0, 50, 40)))
        loss = tf.reduce_sum(tf.square(rows - 1.0))
        train = v1.train.AdagradOptimizer(0.05, initial_accumulator_value=0.1).minimize(loss)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            for _ in range(3):
                session.run(train)
            return session.run(table), {op.type for op in graph.get_operations()}


def test_tf1_adagrad_runs_the_kernel_on_probed_tasks_with_tf1s_maths(module):
    assert native.probe([LOCAL]) == [LOCAL]
    ours, ours_ops = _tf1_adagrad_rows([LOCAL])
    theirs, their_ops = _tf1_adagrad_rows([])
    assert "TfdistSparseApplyAdagrad" in ours_ops and "ResourceSparseApplyAdagrad" not in ours_ops
    assert "TfdistSparseApplyAdagrad" not in their_ops and "ResourceSparseApplyAdagrad" in their_ops
    # TF1's update (no epsilon); TF's vectorized rsqrt is a refined approximation, ours 1 / sqrt
    np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-7)


def test_tf1_adagrad_kernels_on_one_task_share_one_unused_epsilon(module):
    """A packed model updates some fifty parts per ps: one constant input for all, not one each."""
    from toolkit._compat.tensorflow import native_tf1_adagrad

    native_tf1_adagrad()
    v1 = tf.compat.v1
    assert native.probe([LOCAL]) == [LOCAL]
    with tf.Graph().as_default() as graph, native.kernels_on([LOCAL]), tf.device(LOCAL):
        tables = [v1.get_variable(f"t{i}", [50, 4], use_resource=True) for i in range(3)]
        loss = sum(tf.reduce_sum(tf.gather(t, tf.constant([1, 7]))) for t in tables)
        v1.train.AdagradOptimizer(0.05).minimize(loss)
    applies = [op for op in graph.get_operations() if op.type == "TfdistSparseApplyAdagrad"]
    assert len(applies) == 3 and len({op.inputs[3].ref() for op in applies}) == 1


def test_no_compiler_means_tensorflows_kernels_and_says_how_to_get_one(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv(native.ENV_DIR, str(tmp_path / "native"))  # nothing built there yet
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++, no c++
    assert native.load() is None
    assert "no C++ compiler" in caplog.text and "apt-get install g++" in caplog.text
    assert not native.usable_on(LOCAL)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_parts_gather_and_update_equal_the_single_part_kernels_row_for_row(module, dtype, index_dtype):
    rng = np.random.RandomState(3)
    tables = [rng.normal(0, 0.1, (rows, 4)).astype(dtype) for rows in (7, 5, 9)]
    which = np.array([2, 0, 0, 1, 2, 2], np.int32)
    rows = np.array([8, 0, 6, 4, 0, 3], index_dtype)
    grads = [rng.normal(0, 1, (6, 4)).astype(dtype) for _ in range(2)]
    parts = [tf.Variable(t) for t in tables]
    accums = [tf.Variable(np.full(t.shape, 0.1, dtype)) for t in tables]
    got = native.gather_parts([p.handle for p in parts], which, rows, dtype)
    np.testing.assert_array_equal(got.numpy(), np.stack([tables[w][r] for w, r in zip(which, rows, strict=True)]))
    for grad in grads:
        native.sparse_apply_adagrad_parts([p.handle for p in parts], [a.handle for a in accums],
                                          tf.constant(0.05, dtype), tf.constant(grad), which, rows)
    for p, table in enumerate(tables):  # the single-part kernel on each part's rows, in the same order
        mine = which == p
        expected = _update(lambda **kw: native.sparse_apply_adagrad(**kw, use_epsilon=False), table,
                           rows[mine], [g[mine] for g in grads])
        np.testing.assert_array_equal(parts[p].numpy(), expected[0])
        np.testing.assert_array_equal(accums[p].numpy(), expected[1])


@pytest.mark.parametrize(("which", "rows", "error"), [
    ([0, 2], [1, 1], r"which\[1\] = 2 is not in \[0, 2\)"),
    ([0, 1], [1, 5], r"rows\[1\] = 5 is not in \[0, 5\) \(part 1\)"),
    ([0, 1], [-1, 1], r"rows\[0\] = -1 is not in \[0, 4\) \(part 0\)"),
])
def test_a_part_or_row_outside_the_parts_is_an_error_naming_it(module, which, rows, error):
    parts = [tf.Variable(np.zeros((4, 2), np.float32)), tf.Variable(np.zeros((5, 2), np.float32))]
    with pytest.raises(tf.errors.InvalidArgumentError, match=error):
        native.gather_parts([p.handle for p in parts], np.array(which, np.int32), np.array(rows, np.int64),
                            tf.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=error):
        native.sparse_apply_adagrad_parts([p.handle for p in parts], [p.handle for p in parts], tf.constant(0.1),
                                          tf.zeros([2, 2]), np.array(which, np.int32), np.array(rows, np.int64))


def test_parts_of_different_widths_are_refused(module):
    parts = [tf.Variable(np.zeros((4, 2), np.float32)), tf.Variable(np.zeros((4, 3), np.float32))]
    with pytest.raises(tf.errors.InvalidArgumentError, match="parts must be matrices of one width: part 1"):
        native.gather_parts([p.handle for p in parts], np.array([0], np.int32), np.array([0], np.int64), tf.float32)


def _packed_steps(tasks, optimizer, *, use_resource=True):
    """Three steps of a packed embedding lookup (3 columns, tables in 2 parts) on this task: (tables, op types)."""
    from toolkit._compat.tensorflow import distinct_row_updates, native_tf1_adagrad
    from toolkit.estimator.canned._fast_columns import fast_input_layer

    native_tf1_adagrad()
    distinct_row_updates()
    v1 = tf.compat.v1
    fc = v1.feature_column
    columns = [fc.embedding_column(fc.categorical_column_with_identity(f"C{i}", 10), 3,
                                   initializer=v1.random_normal_initializer(0, 0.1, seed=i)) for i in range(3)]
    with tf.Graph().as_default() as graph, native.kernels_on(tasks), tf.device(LOCAL):
        ids = {f"C{i}": tf.constant([[1 + i], [7], [3 - i], [7], [-1]], tf.int64) for i in range(3)}
        with v1.variable_scope("m", partitioner=v1.fixed_size_partitioner(2), use_resource=use_resource):
            out = fast_input_layer(ids, columns)
        train = optimizer().minimize(tf.reduce_sum(tf.square(out - 1.0)))
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            for _ in range(3):
                session.run(train)
            tables = session.run(v1.trainable_variables())
    return tables, [op.type for op in graph.get_operations()]


@pytest.mark.parametrize("optimizer", ["adagrad", "ftrl"])
def test_packed_lookups_on_a_probed_task_read_and_update_every_part_in_one_op(module, optimizer):
    """TF1 Adagrad: one gather and one update for the six parts; FTRL: one gather, TF's update per part."""
    make = {"adagrad": lambda: tf.compat.v1.train.AdagradOptimizer(0.1),
            "ftrl": lambda: tf.compat.v1.train.FtrlOptimizer(0.1)}[optimizer]
    assert native.probe([LOCAL]) == [LOCAL]
    ours, ours_ops = _packed_steps([LOCAL], make)
    theirs, their_ops = _packed_steps([], make)
    assert ours_ops.count("TfdistGatherParts") == 1 and "TfdistGatherParts" not in their_ops
    if optimizer == "adagrad":
        assert ours_ops.count("TfdistSparseApplyAdagradParts") == 1 and "TfdistSparseApplyAdagrad" not in ours_ops
    else:
        assert "TfdistSparseApplyAdagradParts" not in ours_ops and ours_ops.count("ResourceSparseApplyFtrl") == 6
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


def test_ref_variables_on_a_probed_task_take_tensorflows_gathers(module):
    """TF1's ref variables (``use_resource=False``, ``disable_v2_behavior()``) have no handle to pass."""
    make = lambda: tf.compat.v1.train.AdagradOptimizer(0.1)  # noqa: E731
    assert native.probe([LOCAL]) == [LOCAL]
    ours, ours_ops = _packed_steps([LOCAL], make, use_resource=False)
    theirs, _ = _packed_steps([], make, use_resource=False)
    assert "TfdistGatherParts" not in ours_ops and "TfdistSparseApplyAdagradParts" not in ours_ops
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
