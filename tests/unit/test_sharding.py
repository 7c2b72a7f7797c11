"""Sharded tables in one process: routing, lookup, sparse optimizers, checkpoints.

Shards live on CPU:0 here (several shards on one device behave exactly like
shards on several devices for everything but placement, which the cluster
test covers).
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from strategies.sharding import ShardedTable, ShardingError, ShardLayout, placement_report  # noqa: E402
from toolkit.layers import (  # noqa: E402
    ShardedEmbedding,
    SparseAdagrad,
    SparseAdam,
    SparseSGD,
    make_sparse_optimizer,
    make_train_step,
    model_placement_report,
    sharded_tables,
)

_INIT = keras.initializers.RandomUniform(-1.0, 1.0, seed=3)


def _table(rows=10, dim=3, shards=2, partition="div", name="items", init=_INIT):
    return ShardedTable.create(name, rows, dim, initializer=init, num_shards=shards, partition=partition)


@pytest.mark.parametrize("partition", ["div", "mod"])
@pytest.mark.parametrize("rows,shards", [(10, 1), (10, 3), (7, 7), (1001, 4), (40, 12)])
def test_layout_routes_every_id_to_the_shard_that_holds_it(partition, rows, shards):
    layout = ShardLayout(partition, rows, shards)
    assert sum(layout.sizes) == rows and max(layout.sizes) - min(layout.sizes) <= 1
    shard, local = (t.numpy() for t in layout.route(tf.range(rows, dtype=tf.int64)))
    for s in range(shards):
        held = layout.global_rows(s)
        assert len(held) == layout.sizes[s]
        np.testing.assert_array_equal(np.flatnonzero(shard == s), np.sort(held))
        np.testing.assert_array_equal(local[held], np.arange(len(held)))


def test_layout_errors_name_the_field_and_the_fix():
    with pytest.raises(ShardingError, match=r"`partition` is 'hash'; expected one of \['div', 'mod'\]") as info:
        ShardLayout("hash", 10, 2)
    assert info.value.field == "partition"
    with pytest.raises(ShardingError, match="`num_shards` is 5 but the table has only 3 rows. Use at most 3"):
        ShardLayout("div", 3, 5)


@pytest.mark.parametrize("partition", ["div", "mod"])
def test_lookup_returns_the_rows_and_gathers_only_them(partition):
    table = _table(partition=partition)
    ids = np.array([[0, 9, 3], [3, 5, 1]])
    np.testing.assert_allclose(table.lookup(ids).numpy(), table.to_numpy()[ids])

    graph = tf.function(table.lookup).get_concrete_function(tf.TensorSpec([None], tf.int64)).graph
    op_types = [op.type for op in graph.get_operations()]
    # one sparse gather per shard, and no read of a whole shard (the table is never materialised)
    assert op_types.count("ResourceGather") == 2
    assert "ReadVariableOp" not in op_types

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(table.lookup(ids))
    grads = tape.gradient(loss, list(table.shards))
    assert all(isinstance(g, tf.IndexedSlices) for g in grads)
    touched = sorted(int(table.layout.global_rows(s)[i]) for s, g in enumerate(grads) for i in g.indices.numpy())
    assert touched == [0, 1, 3, 5, 9]  # each distinct id once


def test_out_of_range_ids_fail_with_a_message_naming_the_table():
    table = _table()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"sharded table 'items': every id must be in \[0, 10\)"):
        table.lookup([2, 10])


def _dense_twin_step(keras_optimizer, dense, grad):
    keras_optimizer.apply_gradients([(tf.convert_to_tensor(grad), dense)])


@pytest.mark.parametrize("partition", ["div", "mod"])
@pytest.mark.parametrize("name,make_keras", [
    ("sgd", lambda: keras.optimizers.SGD(0.1)),
    ("adagrad", lambda: keras.optimizers.Adagrad(0.1)),
    ("adam", lambda: keras.optimizers.Adam(0.1)),
])
def test_sparse_optimizers_match_keras_on_rows_looked_up_every_step(partition, name, make_keras):
    table = _table(partition=partition)
    dense = keras.Variable(table.to_numpy())
    sparse_opt = make_sparse_optimizer(name, learning_rate=0.1).build([table])
    keras_opt = make_keras()
    ids = tf.constant([4, 0, 1, 2, 3, 5, 6, 7, 8, 9, 4])  # every row, one twice
    weights = tf.random.stateless_normal([11, 3], seed=(1, 2))
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table.lookup(ids) * weights) ** 2
        sparse_opt.apply([(table, tape.gradient(loss, list(table.shards)))])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(dense, ids) * weights) ** 2
        _dense_twin_step(keras_opt, dense, tape.gradient(loss, dense))
    np.testing.assert_allclose(table.to_numpy(), dense.numpy(), rtol=2e-5, atol=2e-6)
    assert int(sparse_opt.iterations.numpy()) == 3


def test_adam_touches_only_looked_up_rows_of_the_table_and_its_slots():
    table = _table(rows=12, shards=3)
    before = table.to_numpy()
    opt = SparseAdam(0.1).build([table])
    ids = tf.constant([1, 5, 5, 10])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(table.lookup(ids) ** 2)
    opt.apply([(table, tape.gradient(loss, list(table.shards)))])
    after, m, v = table.to_numpy(), opt.slots["items"]["m"].to_numpy(), opt.slots["items"]["v"].to_numpy()
    touched = np.zeros(12, bool)
    touched[[1, 5, 10]] = True
    assert np.all(np.any(after != before, axis=1) == touched)
    assert np.all(np.any(m != 0, axis=1) == touched) and np.all(np.any(v != 0, axis=1) == touched)
    assert [s.devices for s in opt.slots["items"].values()] == [table.devices, table.devices]


def test_sparse_optimizer_arguments_are_checked():
    with pytest.raises(ShardingError,
                       match=r"sparse optimizer `name` is 'rmsprop'; expected one of "
                             r"\['adagrad', 'adam', 'ftrl', 'sgd'\]"):
        make_sparse_optimizer("rmsprop")
    with pytest.raises(ShardingError, match="SparseSGD `learning_rate` is -1; expected a positive number"):
        SparseSGD(-1)
    with pytest.raises(ShardingError, match=r"SparseAdam `beta_1` is 1.0; expected a number in \[0, 1\)"):
        SparseAdam(beta_1=1.0)
    with pytest.raises(ShardingError, match=r"apply called before build\(tables\)"):
        SparseAdagrad().apply([])


def test_div_checkpoint_restores_into_another_shard_count_with_its_slots(tmp_path):
    table = _table(rows=11, shards=2)
    opt = SparseAdam(0.1).build([table])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(table.lookup([0, 6, 10]) ** 2)
    opt.apply([(table, tape.gradient(loss, list(table.shards)))])
    path = tf.train.Checkpoint(table=table, opt=opt).save(str(tmp_path / "ckpt"))

    other = _table(rows=11, shards=3, init=keras.initializers.Zeros())
    other_opt = SparseAdam(0.1).build([other])
    tf.train.Checkpoint(table=other, opt=other_opt).restore(path).assert_consumed()
    np.testing.assert_array_equal(other.to_numpy(), table.to_numpy())
    np.testing.assert_array_equal(other_opt.slots["items"]["v"].to_numpy(), opt.slots["items"]["v"].to_numpy())
    assert int(other_opt.iterations.numpy()) == 1


def test_mod_checkpoint_restores_into_the_same_shard_count_and_explains_otherwise(tmp_path):
    table = _table(shards=2, partition="mod")
    path = tf.train.Checkpoint(table=table).save(str(tmp_path / "ckpt"))
    same = _table(shards=2, partition="mod", init=keras.initializers.Zeros())
    tf.train.Checkpoint(table=same).restore(path).assert_consumed()
    np.testing.assert_array_equal(same.to_numpy(), table.to_numpy())

    with pytest.raises(ShardingError,
                       match=r"build the table with num_shards=2 \(mod checkpoints only restore") as info:
        tf.train.Checkpoint(table=_table(shards=3, partition="mod")).restore(path)
    assert info.value.field == "checkpoint"
    with pytest.raises(ShardingError, match="build the table with 10 rows of width 3"):
        tf.train.Checkpoint(table=_table(rows=12, shards=2, partition="mod")).restore(path)


def test_placement_report_lists_each_shard_with_rows_bytes_and_slot_bytes():
    table = _table(rows=10, dim=4, shards=2)
    opt = SparseAdam().build([table])
    report = placement_report([table], slots=opt.slots_by_table())
    lines = report.splitlines()
    assert lines[0].split() == ["table", "shard", "task", "/", "device", "rows", "count", "bytes", "slot", "bytes"]
    assert "items      0  localhost-0 CPU:0  0..4" in report and "80 B       160 B" in report
    assert "items      1  localhost-0 CPU:0  5..9" in report


def test_tables_refuse_strategies_they_cannot_shard_under():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope(), pytest.raises(ShardingError, match="current strategy is MirroredStrategy") as info:
        _table()
    assert info.value.field == "strategy"
    with pytest.raises(ShardingError, match="`num_shards` is 3 but 2 devices were given"):
        ShardedTable.create("t", 10, 2, initializer=_INIT, num_shards=3, devices=["/cpu:0", "/cpu:0"])
    with pytest.raises(ShardingError,
                       match=r"'/device:CPU:42', which is not a device of this process \(available: ") as info:
        ShardedTable.create("t", 10, 2, initializer=_INIT, devices=["/cpu:0", "/device:CPU:42"])
    assert info.value.field == "devices"


def _toy_model(num_shards=2):
    ids = keras.Input((), dtype="int64", name="ids")
    vectors = ShardedEmbedding(50, 4, num_shards=num_shards, name="ids_embedding")(ids)
    return keras.Model(ids, keras.layers.Dense(1, name="out")(vectors))


def test_sharded_embedding_is_a_keras_layer_kept_out_of_keras_optimizers():
    model = _toy_model()
    assert model.output_shape == (None, 1)
    assert [v.path for v in model.trainable_variables] == ["out/kernel", "out/bias"]
    (table,) = sharded_tables(model)
    assert table.num_shards == 2 and table.name == "ids_embedding"
    config = model.get_layer("ids_embedding").get_config()
    assert config["input_dim"] == 50 and config["num_shards"] == 2 and config["partition"] == "div"
    with pytest.raises(ShardingError, match="ShardedEmbedding `output_dim` is 0; expected a positive integer"):
        ShardedEmbedding(10, 0)


def test_train_step_trains_dense_and_sharded_parts_of_the_recommender():
    from models import synthetic_interactions
    from toolkit.layers import recommender

    model = recommender(40, 300, embedding_dim=4, hidden_units=(8,), num_shards=2, seed=0)
    sparse = SparseAdam(0.05)
    step = make_train_step(model, loss=keras.losses.BinaryCrossentropy(from_logits=True),
                           optimizer=keras.optimizers.Adam(0.01), sparse_optimizer=sparse)
    features, labels = synthetic_interactions(2048, num_users=40, num_items=300, seed=1)
    data = iter(tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(2048, seed=0).repeat().batch(64))
    losses = [float(step(*next(data))) for _ in range(150)]
    assert np.mean(losses[-15:]) < np.mean(losses[:15]) - 0.05
    report = model_placement_report(model, sparse_optimizer=sparse)
    assert report.count("item_embedding") == 2 and "user_embedding" in report and "item_bias" in report


def test_two_sharded_layers_with_one_name_are_refused():
    ids = keras.Input((), dtype="int64")
    a = ShardedEmbedding(10, 2, name="same")(ids)
    inner = keras.Model(ids, a, name="inner")
    outer_ids = keras.Input((), dtype="int64")
    twin = ShardedEmbedding(10, 2, name="same")
    outer = keras.Model(outer_ids, keras.layers.Add()([inner(outer_ids), twin(outer_ids)]))
    with pytest.raises(ShardingError, match="two ShardedEmbedding layers are named 'same'"):
        sharded_tables(outer)


def test_keras_weight_files_hold_the_tables_and_reload_into_another_layout(tmp_path):
    from toolkit.layers import recommender

    model = recommender(30, 100, embedding_dim=4, hidden_units=(8,), num_shards=2, seed=1)
    model.save_weights(str(tmp_path / "m.weights.h5"))
    for options in ({"num_shards": 3}, {"num_shards": 2, "partition": "mod"}):
        other = recommender(30, 100, embedding_dim=4, hidden_units=(8,), seed=9, **options)
        other.load_weights(str(tmp_path / "m.weights.h5"))
        for saved, loaded in zip(sharded_tables(model), sharded_tables(other), strict=False):
            np.testing.assert_array_equal(loaded.to_numpy(), saved.to_numpy())
    model.save(str(tmp_path / "m.keras"))
    reloaded = keras.models.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_array_equal(sharded_tables(reloaded)[1].to_numpy(), sharded_tables(model)[1].to_numpy())
    with pytest.raises(ValueError, match="the saved table has 100 rows of width .* but this one has 101 rows"):
        recommender(30, 101, embedding_dim=4, hidden_units=(8,)).load_weights(str(tmp_path / "m.weights.h5"))


def test_loops_that_cannot_train_the_table_are_refused():
    model = _toy_model()
    model.compile(optimizer="adam", loss="mse")
    x, y = np.arange(8) % 50, np.zeros((8, 1), "float32")
    with pytest.raises(ShardingError, match="ShardedEmbedding 'ids_embedding' is being trained by a loop that cannot"):
        model.fit(x, y, epochs=1, verbose=0)
    assert model.predict(x, verbose=0).shape == (8, 1)  # inference is fine
    model.get_layer("ids_embedding").trainable = False  # a frozen table is fine too
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=1, verbose=0)


def test_fit_trains_a_model_with_sharded_tables_and_checkpoints_the_sparse_slots(tmp_path):
    """``toolkit.fit`` picks ``ShardedTrainStep`` through the engine's train-step seam."""
    import functools

    from _models import compiled

    from models import synthetic_interactions
    from toolkit import fit
    from toolkit.layers import ShardedTrainStep, recommender
    from toolkit.training import FitOptions

    features, labels = synthetic_interactions(2048, num_users=40, num_items=300, seed=1)

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(2048, seed=0).repeat()
        return data.batch(context.get_per_replica_batch_size(64))

    model_fn = functools.partial(recommender, 40, 300, embedding_dim=4, hidden_units=(8,), num_shards=2, seed=0)
    sparse = SparseAdam(0.05)
    history = fit(compiled(model_fn, optimizer=lambda: keras.optimizers.Adam(0.01), metrics=(), steps_per_execution=10,
                           loss=keras.losses.BinaryCrossentropy(from_logits=True)),
                  dataset_fn, epochs=2, steps_per_epoch=50, model_dir=str(tmp_path), verbose=0,
                  options=FitOptions(train_step=functools.partial(ShardedTrainStep, sparse_optimizer=sparse)))
    assert history["loss"][-1] < history["loss"][0] - 0.05
    assert int(sparse.iterations.numpy()) == history.global_step == 100
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    slots = [n for n in reader.get_variable_to_shape_map() if n.startswith("sparse_optimizer/")]
    assert any("item_embedding" in n for n in slots), slots
    exported = keras.models.load_model(history.exports["keras"])
    trained = {t.name: t.to_numpy() for t in sharded_tables(history.model)}
    for table in sharded_tables(exported):
        np.testing.assert_array_equal(table.to_numpy(), trained[table.name])
    untrained = sharded_tables(model_fn())[1].to_numpy()
    assert not np.allclose(trained["item_embedding"], untrained)


@pytest.mark.parametrize("initializer", [keras.initializers.RandomUniform(-0.05, 0.05, seed=3),
                                         keras.initializers.RandomUniform(-0.05, 0.05),
                                         keras.initializers.GlorotUniform(seed=4)])
def test_shards_start_with_their_own_values_from_the_whole_tables_distribution(initializer):
    from strategies.sharding import ShardedTable, _partition_aware

    rows, dim = 4000, 8
    table = ShardedTable.create("t", rows, dim, initializer=initializer, num_shards=2)
    first, second = (shard.numpy() for shard in table.shards)
    assert not np.allclose(first, second)
    whole = initializer([rows, dim], dtype="float32").numpy()
    np.testing.assert_allclose(table.to_numpy().std(), whole.std(), rtol=0.05)
    assert abs(table.to_numpy().mean()) < 0.1 * whole.std()
    # the parameter-server path: the partitioner passes each shard's shape and offset
    build = _partition_aware(initializer)
    halves = [build([rows, dim], "float32", partition_shape=[rows // 2, dim], partition_offset=[o, 0]).numpy()
              for o in (0, rows // 2)]
    assert not np.allclose(*halves)
    np.testing.assert_allclose(np.concatenate(halves).std(), whole.std(), rtol=0.05)
    # deterministic: the same seeded initializer builds the same table again
    again = ShardedTable.create("t2", rows, dim, initializer=initializer, num_shards=2)
    np.testing.assert_array_equal(again.to_numpy(), table.to_numpy())


def test_sparse_adam_loses_no_moment_update_when_steps_run_concurrently():
    """Asynchronous workers update the same rows at once; here four threads play the workers."""
    import threading

    from strategies.sharding import ShardedTable

    table = ShardedTable.create("race", 4, 2, initializer=tf.zeros_initializer(), num_shards=1)
    optimizer = SparseAdam(0.001, beta_1=0.999, beta_2=0.999).build([table])
    gradient = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0], tf.int64), tf.constant([4, 2], tf.int64))
    step = tf.function(lambda: optimizer.apply([(table, [gradient])]))
    step()

    def worker():
        for _ in range(300):
            step()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    steps = int(optimizer.iterations.numpy())
    serial = 1 - 0.999 ** steps  # m after `steps` updates with gradient 1, one at a time
    m, v = (optimizer.slots["race"][name].to_numpy()[0, 0] for name in ("m", "v"))
    # one lost update would leave m about 0.0003 short; a concurrent read can only push it above serial
    assert steps == 1201 and m >= serial - 1e-4 and v >= serial - 1e-4, (m, v, serial)


def test_tables_built_under_fits_named_variables_train():
    """Under parameter servers ``fit`` builds the model inside ``NamedVariables``; a plain ``tf.Variable`` (a shard)
    passes ``trainable=None`` down the creators, which was once taken as False: no gradient, no update, no error."""
    from toolkit.training.between_graph import NamedVariables

    with tf.variable_creator_scope(NamedVariables("tfdist_test_sharded")):
        model = _toy_model()
        frozen = tf.Variable(1.0, trainable=False)
        synced = tf.Variable(1.0, synchronization=tf.VariableSynchronization.ON_READ,
                             aggregation=tf.VariableAggregation.SUM)
    assert all(shard.trainable for table in sharded_tables(model) for shard in table.shards)
    assert not frozen.trainable and not synced.trainable
    table = sharded_tables(model)[0]
    before = table.to_numpy()
    step = make_train_step(model, loss="mse", optimizer=keras.optimizers.SGD(0.1), sparse_optimizer=SparseAdagrad(0.5))
    step(tf.constant([1, 2, 3], tf.int64), tf.ones([3, 1]))
    changed = np.flatnonzero(np.any(table.to_numpy() != before, axis=1))
    assert changed.tolist() == [1, 2, 3]


def test_a_trainable_table_with_frozen_shards_is_refused():
    model = _toy_model()
    table = sharded_tables(model)[0]
    table.shards[0]._trainable = False  # what a creator that drops `trainable` did
    with pytest.raises(ShardingError, match="'ids_embedding' .* is trainable but its table shards .* non-trainable"):
        make_train_step(model, loss="mse", optimizer=keras.optimizers.SGD(0.1), sparse_optimizer=SparseSGD())


def test_a_table_larger_than_a_tasks_memory_is_refused_at_build(monkeypatch):
    import strategies.sharding as sharding

    monkeypatch.setattr(sharding, "TASK_MEMORY_BYTES", 1 << 20)  # 1 MiB per task
    with pytest.raises(ShardingError, match=r"embedding table 'clicks' \(100,000 x 8, 3.1 MiB\) in 2 shard\(s\) "
                                            r"needs 1.5 MiB per shard .* more than a task's memory \(1.0 MiB\). Add"):
        ShardedEmbedding(100_000, 8, num_shards=2, name="clicks").build()
    ShardedEmbedding(100_000, 8, num_shards=4, name="fits").build()  # 0.8 MiB shards


def test_a_layout_restored_inside_a_traced_function_is_checked_there():
    """Under parameter servers the restore runs traced (the tensors are symbolic): the check must not need .numpy()."""
    from strategies._sharding_checkpoint import table_saveables

    table = _table()
    layout = table_saveables(table)["layout"]("items/layout")

    def restore(signature):
        layout.restore([tf.constant(signature)], None)  # an op; tf.function returns nothing

    tf.function(lambda: restore(table.layout.signature(table.dim)))()
    with pytest.raises(tf.errors.InvalidArgumentError, match="'items': the checkpoint holds another layout"):
        tf.function(lambda: restore("partition=div rows=11 dim=3 shards=2"))()
