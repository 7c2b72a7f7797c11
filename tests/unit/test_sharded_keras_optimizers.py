"""Sharded tables train with the compiled Keras optimizer's own maths, row-sparse.

Each sparse twin (``sparse_optimizer_for``) is checked against the Keras optimizer
updating the same table as one dense ``keras.Variable`` on the same batches.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from strategies.sharding import ShardedTable, ShardingError
from toolkit.layers import ShardedEmbedding, SparseAdam, make_train_step, sharded_tables, sparse_optimizer_for

_INIT = keras.initializers.RandomUniform(-1.0, 1.0, seed=3)
_ALL_ROWS = [4, 0, 1, 2, 3, 5, 6, 7, 8, 9, 4]  # every row, one twice
_SOME_ROWS = [4, 1, 1, 7]  # most rows never looked up


def _train_both(keras_opt, ids_per_step, *, partition="div", sparse=None):
    table = ShardedTable.create("items", 10, 3, initializer=_INIT, num_shards=2, partition=partition)
    dense = keras.Variable(table.to_numpy())
    sparse = (sparse or sparse_optimizer_for(keras_opt, [table])).build([table])
    for i, ids in enumerate(ids_per_step):
        ids = tf.constant(ids)
        weights = tf.random.stateless_normal([len(ids), 3], seed=(1, i))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table.lookup(ids) * weights) ** 2
        sparse.apply([(table, tape.gradient(loss, list(table.shards)))])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(dense, ids) * weights) ** 2
        keras_opt.apply_gradients([(tf.convert_to_tensor(tape.gradient(loss, dense)), dense)])
    return table.to_numpy(), dense.numpy(), sparse


@pytest.mark.parametrize("partition", ["div", "mod"])
@pytest.mark.parametrize("make_keras, rows", [
    (lambda: keras.optimizers.SGD(0.1), _SOME_ROWS),
    (lambda: keras.optimizers.Adagrad(0.05, initial_accumulator_value=0.1), _SOME_ROWS),
    (lambda: keras.optimizers.Adam(0.1, beta_1=0.8), _ALL_ROWS),  # lazy: equal on rows looked up every step
    (lambda: keras.optimizers.Ftrl(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.1,
                                   beta=0.1), _ALL_ROWS),
], ids=["sgd", "adagrad", "adam", "ftrl"])
def test_the_sparse_twin_of_each_compiled_optimizer_equals_keras(partition, make_keras, rows):
    keras_opt = make_keras()
    got, want, sparse = _train_both(keras_opt, [rows] * 3, partition=partition)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert int(sparse.iterations.numpy()) == 3
    assert sparse.learning_rate == pytest.approx(float(keras_opt.learning_rate.numpy()))


def test_adam_is_lazy_by_default_and_keras_dense_adam_on_request():
    batches = [_ALL_ROWS, _SOME_ROWS, _SOME_ROWS]  # rows seen once, then left alone
    lazy, dense, _ = _train_both(keras.optimizers.Adam(0.1), batches)
    assert not np.allclose(lazy, dense)  # Keras keeps moving rows whose first moment is not zero
    exact, dense, _ = _train_both(keras.optimizers.Adam(0.1), batches, sparse=SparseAdam(0.1, lazy=False))
    np.testing.assert_allclose(exact, dense, rtol=2e-5, atol=2e-6)


def test_optimizers_with_no_sparse_form_are_refused_naming_the_table_and_the_fix():
    table = ShardedTable.create("clicks", 1000, 8, initializer=_INIT)
    for optimizer, words in [(keras.optimizers.RMSprop(), "RMSprop has no row-sparse form"),
                             (keras.optimizers.SGD(0.1, momentum=0.9), "SGD with momentum has no row-sparse form"),
                             (keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)),
                              "learning rate is a schedule"),
                             (keras.optimizers.Adagrad(clipnorm=1.0), "`clipnorm` is 1.0")]:
        with pytest.raises(ShardingError, match=words) as caught:
            sparse_optimizer_for(optimizer, [table])
        assert "'clicks' (1000 x 8)" in str(caught.value)


def test_a_model_trains_its_tables_with_the_optimizer_it_was_given():
    ids = keras.Input((2,), dtype="int64")
    vectors = keras.layers.Flatten()(ShardedEmbedding(40, 4, num_shards=2, name="emb")(ids))
    model = keras.Model(ids, keras.layers.Dense(1)(vectors))
    step = make_train_step(model, loss="mse", optimizer=keras.optimizers.Adagrad(0.5))
    table = sharded_tables(model)[0]
    before = table.to_numpy()
    step(tf.constant([[1, 2], [3, 1]], tf.int64), tf.ones([2, 1]))
    assert np.flatnonzero(np.any(table.to_numpy() != before, axis=1)).tolist() == [1, 2, 3]


@pytest.mark.parametrize("make_keras", [lambda: keras.optimizers.Adagrad(0.1), lambda: keras.optimizers.Adam(0.1),
                                        lambda: keras.optimizers.Ftrl(0.1), lambda: keras.optimizers.SGD(0.1)],
                         ids=["adagrad", "adam", "ftrl", "sgd"])
def test_no_op_of_a_training_step_holds_a_whole_table_gradient_or_slot(make_keras):
    ids = keras.Input((3,), dtype="int64")
    vectors = keras.layers.Flatten()(ShardedEmbedding(1000, 8, num_shards=2, name="emb")(ids))
    model = keras.Model(ids, keras.layers.Dense(1)(vectors))
    step = make_train_step(model, loss="mse", optimizer=make_keras())
    graph = step.get_concrete_function(tf.TensorSpec([None, 3], tf.int64), tf.TensorSpec([None, 1])).graph
    whole = {(1000, 8), (500, 8)}  # the table, and one shard (of the table or of a slot)
    shapes = {(op.type, tuple(out.shape.as_list())) for op in graph.get_operations() for out in op.outputs
              if out.shape.rank is not None and out.shape.rank == 2 and None not in out.shape.as_list()}
    assert not [(kind, shape) for kind, shape in shapes if shape in whole]
    step(tf.constant([[1, 2, 600]], tf.int64), tf.ones([1, 1]))  # and it runs


def test_a_table_looked_up_twice_in_a_step_sums_its_rows_gradients_before_the_update():
    """One lookup's rows are distinct, and go to the update as they are; two lookups may repeat rows."""
    ids = keras.Input((2,), dtype="int64")
    layer = ShardedEmbedding(40, 4, num_shards=2, name="twice")
    both = keras.layers.Concatenate()([keras.layers.Flatten()(layer(ids)), keras.layers.Flatten()(layer(ids))])
    model = keras.Model(ids, keras.layers.Dense(1, kernel_initializer="ones")(both))
    table = sharded_tables(model)[0]
    dense = keras.Variable(table.to_numpy())
    keras_opt = keras.optimizers.Adagrad(0.5)
    step = make_train_step(model, loss="mse", optimizer=keras.optimizers.Adagrad(0.5))  # tables: its twin
    batch, labels = tf.constant([[1, 21], [1, 3]], tf.int64), tf.zeros([2, 1])
    with tf.GradientTape() as tape:  # the same forward pass on a dense twin of the table
        rows = tf.gather(dense, batch)
        flat = tf.reshape(rows, [2, 8])
        logits = tf.reduce_sum(tf.concat([flat, flat], axis=1), axis=1, keepdims=True) + model.layers[-1].bias
        loss = tf.reduce_sum(tf.square(logits - labels)) / 2
    keras_opt.apply_gradients([(tf.convert_to_tensor(tape.gradient(loss, dense)), dense)])
    step(batch, labels)
    np.testing.assert_allclose(table.to_numpy(), dense.numpy(), rtol=1e-5, atol=1e-6)


def test_a_keras_embedding_adopts_given_shards_and_saves_as_keras_does(tmp_path):
    """What a between-graph worker does (``shard_source``: the chief's shards); weight files keep Keras' format."""
    from strategies.sharding import shard_source
    from toolkit.layers import has_sharded_tables

    shards = ShardedTable.create("emb", 10, 3, initializer=_INIT, num_shards=2).shards

    def model_fn():
        ids = keras.Input((2,), dtype="int64")
        return keras.Model(ids, keras.layers.Embedding(10, 3, name="emb")(ids))

    with shard_source(lambda name: (list(shards), "div") if name == "emb" else None):
        model = model_fn()
    assert has_sharded_tables(model) and model.weights == []
    table = sharded_tables(model)[0]
    assert table.shards == shards
    np.testing.assert_array_equal(model(np.array([[9, 0]])).numpy()[0], table.to_numpy()[[9, 0]])
    model.save_weights(str(tmp_path / "m.weights.h5"))
    plain = model_fn()  # no source, no parameter servers: one Keras variable
    assert not has_sharded_tables(plain)
    plain.load_weights(str(tmp_path / "m.weights.h5"))
    np.testing.assert_array_equal(plain.get_layer("emb").embeddings.numpy(), table.to_numpy())
