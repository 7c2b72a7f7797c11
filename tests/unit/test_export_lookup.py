"""Exporting just the lookup of a sharded table: the SavedModel serves the checkpoint's rows, shard by shard."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from strategies.sharding import ShardedTable
from toolkit.training.config import TrainingError
from toolkit.training.export_lookup import export_checkpoint_lookup, export_table_lookup

v1 = tf.compat.v1
_IDS = np.array([[0, 9, 4], [4, 7, 1]], np.int64)


def _serve(path, ids):
    return tf.saved_model.load(str(path)).signatures["serving_default"](ids=tf.constant(ids))["embeddings"].numpy()


def _exported_shards(path):
    return {name: shape for name, shape in tf.train.list_variables(str(path / "variables" / "variables"))}


def _table(partition):
    init = tf.keras.initializers.RandomUniform(-1.0, 1.0, seed=3)
    return ShardedTable.create("items", 10, 3, initializer=init, num_shards=3, partition=partition)


@pytest.mark.parametrize("partition", ["div", "mod"])
def test_a_live_table_exports_its_shards_and_serves_its_rows(tmp_path, partition):
    table = _table(partition)
    export_table_lookup(table, tmp_path / "lookup")
    assert _exported_shards(tmp_path / "lookup") == {"shard_0": [4, 3], "shard_1": [3, 3], "shard_2": [3, 3]}
    served = _serve(tmp_path / "lookup", _IDS)
    assert served.shape == (2, 3, 3)
    np.testing.assert_array_equal(served, table.to_numpy()[_IDS])


def test_a_checkpointed_mod_table_exports_with_its_own_layout(tmp_path):
    table = _table("mod")
    prefix = tf.train.Checkpoint(table=table).save(str(tmp_path / "ckpt" / "c"))
    key = next(k for k, _ in tf.train.list_variables(prefix) if k.startswith("table/") and "mod3_10x3" in k)
    with pytest.raises(TrainingError, match=r"`num_shards` is 2 but .* a 'mod' table saved in 3 shards"):
        export_checkpoint_lookup(prefix, tmp_path / "bad", key=key, num_shards=2)
    export_checkpoint_lookup(tmp_path / "ckpt", tmp_path / "lookup", key=key)
    np.testing.assert_array_equal(_serve(tmp_path / "lookup", _IDS), table.to_numpy()[_IDS])


def test_an_estimator_partitioned_table_reexports_in_another_shard_count(tmp_path):
    key = "dnn/input_from_feature_columns/input_layer/C1_embedding/embedding_weights"
    with tf.Graph().as_default():
        v1.set_random_seed(1)
        with v1.variable_scope("dnn/input_from_feature_columns/input_layer/C1_embedding",
                               partitioner=v1.fixed_size_partitioner(2)):
            v1.get_variable("embedding_weights", [11, 4], initializer=v1.random_normal_initializer())
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(session, str(tmp_path / "model.ckpt"), global_step=7)
    rows = tf.train.load_checkpoint(prefix).get_tensor(key)
    export_checkpoint_lookup(prefix, tmp_path / "lookup", key=key, num_shards=3)
    assert _exported_shards(tmp_path / "lookup") == {"shard_0": [4, 4], "shard_1": [4, 4], "shard_2": [3, 4]}
    ids = np.array([10, 0, 3, 3, 8], np.int64)
    np.testing.assert_array_equal(_serve(tmp_path / "lookup", ids), rows[ids])
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"{key}.*: every id must be in \[0, 11\)"):
        _serve(tmp_path / "lookup", np.array([11], np.int64))
    with pytest.raises(TrainingError, match=r"`key` is 'C1', .* Its tables: " + key):
        export_checkpoint_lookup(prefix, tmp_path / "other", key="C1")
    with pytest.raises(TrainingError, match=r"`export_dir` is .* already exists"):
        export_checkpoint_lookup(prefix, tmp_path / "lookup", key=key)
