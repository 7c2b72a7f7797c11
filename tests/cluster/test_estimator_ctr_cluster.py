"""The Estimator front door for click-through models, as TF1 users wrote it, on 2 ps between-graph.

``tf.estimator.DNNLinearCombinedClassifier`` (``import toolkit.compat.v1 as tf``) over Criteo-shaped
data: ``embedding_column``s for the deep part, the categorical columns themselves for the wide
part (FTRL), ``input_layer_partitioner=tf.fixed_size_partitioner(2)``. The test reads what
happened from the job's artifacts: each table's two shards placed on the two ps, the row-sparse
update ops in the training graph, the checkpoint before and after training (rows of both shards
moved), and the held-out log loss against the base rate's.
"""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

from tf_config import generate

_TIMEOUT = 240
_TABLE = "dnn/input_from_feature_columns/input_layer/C1_embedding/embedding_weights"
_WIDE = "linear/linear_model/C1/weights"


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    return forked_hand_cluster


_SCRIPT = textwrap.dedent('''
    import sys
    import toolkit.compat.v1 as tf
    from toolkit.data import criteo_like

    VOCAB, FEATURES = 40, 3
    fc = tf.feature_column
    train, heldout = criteo_like(6000, vocab=VOCAB, seed=1), criteo_like(2000, vocab=VOCAB, seed=999)

    def named(data):
        features = {"C%d" % (i + 1): data.categorical[:, i:i + 1] for i in range(FEATURES)}
        features["dense"] = data.dense
        return features

    def input_fn(data, training):
        ds = tf.data.Dataset.from_tensor_slices((named(data), data.labels))
        return ds.shuffle(6000, seed=1).repeat().batch(128) if training else ds.batch(2000)

    wide = [fc.categorical_column_with_identity("C%d" % (i + 1), VOCAB) for i in range(FEATURES)]
    deep = [fc.numeric_column("dense", shape=(13,))] + [fc.embedding_column(c, 4) for c in wide]
    config = tf.estimator.RunConfig(model_dir=sys.argv[1], save_checkpoints_secs=3600, save_summary_steps=None)
    classifier = tf.estimator.DNNLinearCombinedClassifier(
        linear_feature_columns=wide, linear_optimizer=tf.train.FtrlOptimizer(0.1),
        dnn_feature_columns=deep, dnn_hidden_units=[16], dnn_optimizer=tf.train.AdagradOptimizer(0.1),
        input_layer_partitioner=tf.fixed_size_partitioner(2), config=config,
        loss_reduction=tf.losses.Reduction.SUM_OVER_BATCH_SIZE)

    class Report(tf.train.SessionRunHook):
        def begin(self):
            graph = tf.get_default_graph()
            for v in tf.global_variables():
                if "/part_" in v.op.name:
                    print("variable %s on %s" % (v.op.name, v.device))
            print("update ops " + " ".join(sorted(op.type for op in graph.get_operations() if "Apply" in op.type)))
            print("row sums %d" % sum(op.type == "TfdistRowSum" for op in graph.get_operations()))
            print("part gathers %d" % sum(op.type == "TfdistGatherParts" for op in graph.get_operations()))

    classifier.train(lambda: input_fn(train, True), max_steps=300,
                     hooks=[Report()] if config.is_chief else None)
    if config.is_chief:
        loss = classifier.evaluate(lambda: input_fn(heldout, False), steps=1)["loss"]
        print("held-out log loss %.4f base rate %.4f" % (loss, heldout.base_rate_logloss()))
''')


@pytest.mark.cluster
def test_wide_and_deep_ctr_tables_partitioned_over_two_ps_train_row_sparse(tmp_path, no_orphans, hand_cluster,
                                                                           quiet_tf):
    import tensorflow as tf

    script, model_dir = tmp_path / "ctr_estimator.py", tmp_path / "model"
    script.write_text(_SCRIPT)
    for cfg in generate(chief=1, workers=1, ps=2):
        hand_cluster.start(f"{cfg.task_type}-{cfg.task_index}", [str(script), str(model_dir)], cfg.to_json())
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert codes == {name: 0 for name in hand_cluster.procs}, {n: logs[n][-3000:] for n in logs if codes.get(n) != 0}
    chief = logs["chief-0"]

    # each table in two shards, one on each ps
    for table in (_TABLE, _WIDE):
        placed = dict(re.findall(rf"variable {re.escape(table)}/(part_\d+) on (\S+)", chief))
        assert sorted(placed) == ["part_0", "part_1"], chief[-3000:]
        assert {re.sub(r"/device:.*", "", d) for d in placed.values()} == {"/job:ps/task:0", "/job:ps/task:1"}, placed
    # row-sparse updates: Adagrad for the embeddings, FTRL for the wide weights, one per shard
    updates = re.search(r"update ops (.*)", chief).group(1).split()
    # TF1 Adagrad's row updates run tfdist's native kernel on the ps that probed ready (strategies._native)
    from strategies import _native as native

    if native.load() is not None:  # each ps reads its 3 deep parts in one op, and updates them in one
        assert updates.count("TfdistSparseApplyAdagradParts") == 2, updates
        assert "ResourceSparseApplyAdagrad" not in updates and "TfdistSparseApplyAdagrad" not in updates, updates
    else:
        assert updates.count("ResourceSparseApplyAdagrad") == 2 * 3, updates  # 3 embedding tables x 2 shards
    assert updates.count("ResourceSparseApplyFtrl") == 2 * 3  # the wide weights of 3 columns x 2 shards
    # the chief sums each packed lookup's gradient per row natively: the deep width's and the wide one's
    assert re.search(r"row sums (\d+)", chief).group(1) == ("2" if native.load() is not None else "0")
    # and each ps reads its parts of each width in one op: the deep and the wide on each of 2 ps
    assert re.search(r"part gathers (\d+)", chief).group(1) == ("4" if native.load() is not None else "0")

    # the checkpoint at step 0 and the last: rows of both shards moved
    state = tf.train.get_checkpoint_state(str(model_dir))
    first, last = state.all_model_checkpoint_paths[0], state.model_checkpoint_path
    assert first.endswith("-0") and first != last, list(state.all_model_checkpoint_paths)
    for table in (_TABLE, _WIDE):
        before, after = (tf.train.load_variable(path, table) for path in (first, last))
        assert before.shape == after.shape and before.shape[0] == 40
        moved = np.any(before != after, axis=1)
        assert moved[:20].any() and moved[20:].any(), (table, moved)  # shard 0 holds rows 0..19, shard 1 20..39

    found = re.search(r"held-out log loss ([0-9.]+) base rate ([0-9.]+)", chief)
    assert found, chief[-3000:]
    assert float(found.group(1)) < float(found.group(2)) - 0.02, found.group(0)

    # the deep table's lookup alone, exported shard by shard from the checkpoint, serves its rows
    from toolkit.training.export_lookup import export_checkpoint_lookup

    export_checkpoint_lookup(str(model_dir), str(tmp_path / "lookup"), key=_TABLE)
    ids = np.array([[0, 19], [20, 39]], np.int64)
    served = tf.saved_model.load(str(tmp_path / "lookup")).signatures["serving_default"](ids=tf.constant(ids))
    np.testing.assert_array_equal(served["embeddings"].numpy(), tf.train.load_variable(last, _TABLE)[ids])
