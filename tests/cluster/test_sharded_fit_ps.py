"""``toolkit.fit`` and Keras' ``model.fit`` train embedding tables on 2 ps and 2 workers, from the code a Keras user
writes.

A real cluster on 127.0.0.1 (chief, 2 workers, 2 ps) started by the launcher; every task runs this file.
The model is a small click-through model: a ``keras.layers.Embedding`` large enough to split itself
over both ps, a small ``toolkit.layers.ShardedEmbedding`` that stays whole, dense layers,
``model.compile`` with Keras' ``Adagrad`` and nothing else (no partitioner, no train step, no
sparse optimizer). The checkpoint must show the looked-up rows of both tables and their Adagrad
accumulators moved, and the rows never looked up untouched: under parameter servers ``fit`` once
trained only the dense layers and left every table and slot as initialised, with no error.
"""
from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from strategies import _native as native

_TIMEOUT = 240
_ROWS, _SMALL, _DIM, _BATCH = 20_000, 50, 16, 64  # 20,000 x 16 floats = 1.2 MiB: above the 1 MiB split threshold


def _data():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, _ROWS // 2, size=(1024, 3)).astype(np.int64)  # the upper half is never looked up
    small = rng.integers(0, _SMALL, size=(1024, 1)).astype(np.int64)
    labels = ((ids[:, :1] + small) % 3 == 0).astype(np.float32)
    return {"ids": ids, "small": small}, labels


_INIT = {"class_name": "RandomNormal", "config": {"mean": 0.0, "stddev": 0.01, "seed": 1}}


def _model():
    import keras

    from toolkit.layers import ShardedEmbedding

    ids, small = keras.Input((3,), dtype="int64", name="ids"), keras.Input((1,), dtype="int64", name="small")
    deep = keras.layers.Flatten()(keras.layers.Embedding(_ROWS, _DIM, name="deep_emb",
                                                         embeddings_initializer=_INIT)(ids))
    side = keras.layers.Flatten()(ShardedEmbedding(_SMALL, 4, name="small_emb")(small))
    hidden = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([deep, side]))
    model = keras.Model({"ids": ids, "small": small}, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.1),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True), steps_per_execution=4)
    return model


def _task_main(front_door: str, model_dir: str, out: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import keras
    import tensorflow as tf

    import toolkit
    from toolkit.layers import sharded_tables
    from toolkit.training import FitOptions

    features, labels = _data()

    def dataset_fn(context):
        # every worker reads all 16 batches: whichever does most of the 40 steps looks every row up
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(_BATCH)

    if front_door == "toolkit_fit":
        history = toolkit.fit(_model, dataset_fn, epochs=1, steps_per_epoch=40, model_dir=model_dir, verbose=0,
                              options=FitOptions(export=False))
        model, step = history.model, history.global_step
    else:  # TensorFlow's parameter-server tutorial with Keras' compile/fit, plus tfdist's two lines
        from strategies import make_strategy, run_role

        run_role()  # ps and workers serve here until the chief says goodbye
        toolkit.enable_distributed_keras()
        strategy = make_strategy("parameter_server")
        with strategy.scope():
            model = _model()
        model.fit(dataset_fn, epochs=1, steps_per_epoch=40, verbose=0,
                  callbacks=[keras.callbacks.BackupAndRestore(model_dir, save_freq=40, delete_checkpoint=False)])
        step = 40
    tables = {t.name: list(t.devices) for t in sharded_tables(model)}
    Path(out).write_text(json.dumps({"global_step": step, "devices": tables}))
    return 0


def _checkpoint_arrays(model_dir):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    names = list(reader.get_variable_to_shape_map())
    # a sharded table is saved whole (model/.../table/... or its slots), gathered shard by shard
    return names, {name: reader.get_tensor(name) for name in names if ".ATTRIBUTES/div_" in name}


@pytest.mark.cluster
@pytest.mark.parametrize("front_door", ["toolkit_fit", "keras_fit"])
def test_fit_trains_sharded_tables_and_their_slots_on_two_ps(front_door, tmp_path, no_orphans):
    from toolkit.launcher import launch

    model_dir, out = tmp_path / "model", tmp_path / "chief.json"
    result = launch([sys.executable, __file__, front_door, str(model_dir), str(out)], workers=2, ps=2,
                    job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False, preload=("tensorflow", "keras"))
    _assert_clean_exits(result)
    chief = json.loads(out.read_text())
    # the fast path: each worker runs its own steps on the ps tables (Keras' model.fit: the graph the chief built
    # for it, as its script never gets past run_role())
    assert "between-graph steps: 2 workers take step tokens" in result.task("chief-0").log_path.read_text()
    for worker in ("worker-0", "worker-1"):
        log = result.task(worker).log_path.read_text()
        assert "between-graph steps ready" in log, worker
        assert ("running the chief's shipped steps" in log) == (front_door == "keras_fit"), worker
        # the ps serve tfdist's native sparse Adagrad (where it builds here): probed, then used by each worker
        if native.load() is not None:
            said = log if front_door == "toolkit_fit" else result.task("chief-0").log_path.read_text()
            assert re.search(rf"{worker}'s sparse Adagrad updates on .*task:0.*task:1 run tfdist's native kernel"
                             if front_door == "keras_fit" else
                             r"sparse Adagrad updates on /job:ps/replica:0/task:0, /job:ps/replica:0/task:1 run "
                             r"tfdist's native kernel", said), worker
    ps0, ps1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
    assert sorted(chief["devices"]["deep_emb"]) == [ps0, ps1]  # above the threshold: one shard per ps
    assert len(chief["devices"]["small_emb"]) == 1  # below it: whole
    assert chief["global_step"] == 40

    names, arrays = _checkpoint_arrays(model_dir)
    assert not any("embeddings" in name for name in names), names  # no whole Keras variable anywhere
    table = next(v for k, v in arrays.items() if k.startswith("model/") and k.endswith(f"div_{_ROWS}x{_DIM}"))
    accumulator = next(v for k, v in arrays.items() if "deep_emb/accumulator" in k)
    small_accumulator = next(v for k, v in arrays.items() if "small_emb/accumulator" in k)
    features, _ = _data()
    seen = np.unique(features["ids"])
    unseen = np.setdiff1d(np.arange(_ROWS), seen)
    assert table.shape == (_ROWS, _DIM) and accumulator.shape == (_ROWS, _DIM)
    # A row whose every example met a dead ReLU gets a zero gradient: most, not all, seen rows move.
    slot_moved = accumulator.max(axis=1) > np.float32(0.1)
    assert slot_moved[seen].mean() > 0.8 and not slot_moved[unseen].any(), slot_moved[seen].mean()
    assert small_accumulator.max() > np.float32(0.1)
    initial = _initial_table()  # the same two shards, built in this process
    row_moved = np.any(table != initial, axis=1)
    assert row_moved[seen].mean() > 0.8 and not row_moved[unseen].any(), row_moved[seen].mean()
    np.testing.assert_array_equal(row_moved, slot_moved)
    if front_door == "toolkit_fit":
        _resume_finished(model_dir, tmp_path)


def _resume_finished(model_dir, tmp_path):
    """The same job again on its finished directory: the chief has nothing left to train and says goodbye while
    the workers still build their steps. Each worker ends its own loop before its process exits, or (its work
    still busy after ``work_join_timeout``) leaves without tearing the interpreter down: its work once still
    ran a call against an exited ps at a normal exit, which can abort ("terminate called ...", 134)."""
    from toolkit.launcher import launch

    out = tmp_path / "resumed.json"
    result = launch([sys.executable, __file__, "toolkit_fit", str(model_dir), str(out)], workers=2, ps=2,
                    job_dir=tmp_path / "resumed", timeout=_TIMEOUT, echo=False, preload=("tensorflow", "keras"))
    _assert_clean_exits(result)
    assert json.loads(out.read_text())["global_step"] == 40
    for worker in ("worker-0", "worker-1"):
        log = result.task(worker).log_path.read_text()
        ended = "between-graph steps done:" in log or "without tearing the interpreter down" in log
        assert ended, f"{worker}'s loop still ran when it exited:\n{log[-2000:]}"


def _assert_clean_exits(result):
    """Every task exited with its code (0), and none aborted in TensorFlow's teardown after its goodbye."""
    assert result.ok, result.message
    assert all(t.exit_code == 0 for t in result.tasks), [(t.name, t.exit_code) for t in result.tasks]
    for task in result.tasks:
        assert "terminate called" not in task.log_path.read_text(errors="replace"), task.name


def _initial_table():
    """The deep table as the cluster initialised it: two shards, each drawn with its own derived seed."""
    import keras

    from strategies.sharding import ShardedTable

    table = ShardedTable.create("deep_emb", _ROWS, _DIM, initializer=keras.initializers.get(_INIT), num_shards=2)
    return table.to_numpy()


if __name__ == "__main__":
    sys.exit(_task_main(*sys.argv[1:4]))
