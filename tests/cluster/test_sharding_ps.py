"""Sharded embeddings train across 2 parameter servers under Keras 3.

A real cluster on 127.0.0.1 (chief, 1 worker, 2 ps), started by the local
launcher. Every task runs this file as a script: ``run_role`` makes ps and worker tasks serve, the chief builds a
``ParameterServerStrategy`` with a ``fixed_shards`` partitioner, trains the
wide & deep recommender with sparse Adam through ``ClusterCoordinator``, saves
a checkpoint, and restores it into a local 3-shard copy. The test asserts on
the JSON the chief wrote and on every exit code.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

_TIMEOUT = 300
_USERS, _ITEMS, _STEPS = 64, 2000, 240


def _schedule_training(strategy, coordinator, step, features, labels):
    import tensorflow as tf

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices((features, labels))
        return data.shuffle(4096, seed=1).repeat().batch(64)

    per_worker = coordinator.create_per_worker_dataset(
        lambda: strategy.distribute_datasets_from_function(dataset_fn))
    iterator = iter(per_worker)

    @tf.function
    def scheduled(it):
        batch_features, batch_labels = next(it)
        return strategy.run(step, args=(batch_features, batch_labels))

    losses = [coordinator.schedule(scheduled, args=(iterator,)) for _ in range(_STEPS)]
    coordinator.join()
    return [float(loss.fetch()) for loss in losses]


def _chief_main(out: Path) -> int:
    import keras
    import numpy as np
    import tensorflow as tf

    from models import synthetic_interactions
    from strategies import chief_session, make_coordinator, make_strategy, run_role
    from toolkit.layers import SparseAdam, make_train_step, model_placement_report, recommender, sharded_tables

    cfg = run_role()  # ps and worker tasks serve here and exit
    # min_size shards only the large item table (64 KB: 2 shards of >= 16 KiB); the dense
    # variables and small tables stay whole, as Keras optimizers need
    strategy = make_strategy("parameter_server", tf_config=cfg, partitioner="min_size",
                             partitioner_args={"min_shard_bytes": 16384, "max_shards": 2}, connect_timeout=120)
    coordinator = make_coordinator(strategy)
    features, labels = synthetic_interactions(4096, num_users=_USERS, num_items=_ITEMS, seed=3)
    with chief_session(strategy):
        with strategy.scope():
            model = recommender(_USERS, _ITEMS, embedding_dim=8, hidden_units=(16,), seed=0)
            sparse = SparseAdam(0.05)
            step = make_train_step(model, loss=keras.losses.BinaryCrossentropy(from_logits=True),
                                   optimizer=keras.optimizers.Adam(0.01), sparse_optimizer=sparse)
        items = {t.name: t for t in sharded_tables(model)}["item_embedding"]
        before = items.to_numpy()
        losses = _schedule_training(strategy, coordinator, step, features, labels)
        after, item_m = items.to_numpy(), sparse.slots["item_embedding"]["m"].to_numpy()
        never_seen = np.setdiff1d(np.arange(_ITEMS), features["item_id"])
        path = tf.train.Checkpoint(model=model, sparse_optimizer=sparse).save(str(out.parent / "ckpt" / "ckpt"))

        local = recommender(_USERS, _ITEMS, embedding_dim=8, hidden_units=(16,), num_shards=3, seed=7)
        local_sparse = SparseAdam(0.05).build(sharded_tables(local))
        tf.train.Checkpoint(model=local, sparse_optimizer=local_sparse).restore(path).assert_existing_objects_matched()
        result = {
            "table_devices": {t.name: list(t.devices) for t in sharded_tables(model)},
            "slot_devices": {name: {slot: list(t.devices) for slot, t in slots.items()}
                             for name, slots in sparse.slots.items()},
            "iterations": int(sparse.iterations.numpy()),
            "iterations_device": sparse.iterations.device,
            "dense_devices": sorted({v.value.device for v in model.trainable_variables}),
            "first_loss": float(np.mean(losses[:20])),
            "last_loss": float(np.mean(losses[-20:])),
            "never_seen": int(never_seen.size),
            "untouched_rows_unchanged": bool(np.array_equal(before[never_seen], after[never_seen])),
            "untouched_slots_zero": bool(not item_m[never_seen].any()),
            "touched_rows_changed": bool(not np.allclose(before[features["item_id"]], after[features["item_id"]])),
            "restored_equal": bool(np.array_equal(
                {t.name: t for t in sharded_tables(local)}["item_embedding"].to_numpy(), after)),
            "restored_slot_equal": bool(np.array_equal(local_sparse.slots["item_embedding"]["m"].to_numpy(), item_m)),
            "restored_iterations": int(local_sparse.iterations.numpy()),
            "report": model_placement_report(model, sparse_optimizer=sparse),
        }
    out.write_text(json.dumps(result))
    return 0


@pytest.mark.cluster
def test_embedding_tables_shard_train_and_checkpoint_across_two_ps(tmp_path, no_orphans):
    from toolkit.launcher import launch

    out = tmp_path / "result.json"
    # forked from one TensorFlow import (``preload``): four fresh imports at once would double the start-up
    result = launch([sys.executable, __file__, str(out)], chief=1, workers=1, ps=2, job_dir=tmp_path / "job",
                    timeout=_TIMEOUT, echo=False, preload=("tensorflow", "keras"))
    assert result.ok, result.message
    assert {t.name: (t.exit_code, t.stopped) for t in result.tasks} == {
        "chief-0": (0, False), "worker-0": (0, False), "ps-0": (0, False), "ps-1": (0, False)}

    r = json.loads(out.read_text())
    ps0, ps1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
    assert sorted(r["table_devices"]["item_embedding"]) == [ps0, ps1]  # one shard on each ps
    assert len(r["table_devices"]["user_embedding"]) == len(r["table_devices"]["item_bias"]) == 1
    for name, devices in r["table_devices"].items():
        assert set(devices) <= {ps0, ps1}, (name, devices)
        for slot in ("m", "v"):  # Adam slots sharded alongside, never on the coordinator
            assert r["slot_devices"][name][slot] == devices, (name, slot)
    assert set(r["dense_devices"]) <= {ps0, ps1}
    assert r["iterations"] == _STEPS and r["iterations_device"] in (ps0, ps1)
    assert r["last_loss"] < r["first_loss"] - 0.05, (r["first_loss"], r["last_loss"])
    assert r["never_seen"] > 0 and r["untouched_rows_unchanged"] and r["untouched_slots_zero"]
    assert r["touched_rows_changed"]
    assert r["restored_equal"] and r["restored_slot_equal"] and r["restored_iterations"] == _STEPS
    report_lines = r["report"].splitlines()
    assert any(line.startswith("item_embedding") and "ps-1 CPU:0" in line for line in report_lines), r["report"]
    assert any(line.startswith("item_embedding") and "ps-0 CPU:0" in line for line in report_lines), r["report"]


if __name__ == "__main__":
    sys.exit(_chief_main(Path(sys.argv[1])))
