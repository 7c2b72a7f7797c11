"""Synchronous parameter-server training through ``toolkit.fit`` on a real local cluster.

Every task runs this file as a script; ``fit(..., options=FitOptions(sync=SyncConfig(...)))`` gives
each task its role. One job (chief + 2 workers + 1 ps, digits): the global step
ends exactly on the requested total, every scheduled contribution is accounted
for (aggregated, stale or pending), the loss falls, checkpoints and the
learning-rate schedule follow aggregated updates, and every task exits 0.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import pytest

_BATCH = 32
_TIMEOUT = 240
_AGGREGATE = 2


def _task_main(argv) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    import keras

    import models
    from toolkit import CheckpointConfig, SyncConfig, data, fit
    from toolkit.training import FitOptions

    def model_fn():
        model = models.digits_mlp(seed=3)
        model.compile(optimizer=keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.5, 12, 0.5)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                      steps_per_execution=2)
        return model

    train = data.load("digits")
    history = fit(model_fn, train.dataset_fn(_BATCH), epochs=2, steps_per_epoch=12, model_dir=args.model_dir,
                  verbose=0, options=FitOptions(checkpoint=CheckpointConfig(every=8), export=False,
                                                sync=SyncConfig(replicas_to_aggregate=_AGGREGATE)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"role": history.role, "history": history.history, "global_step": history.global_step,
              "sync_stats": history.sync_stats, "rates": history.rates}
    (out / f"{os.environ.get('TFDIST_TASK_NAME', 'local')}.json").write_text(json.dumps(result))


@pytest.mark.cluster
def test_sync_replicas_aggregate_two_contributions_per_global_step(tmp_path, no_orphans):
    import tensorflow as tf

    from toolkit.launcher import launch

    model_dir = tmp_path / "model"
    result = launch(["python", __file__, "--model-dir", str(model_dir), "--out", str(tmp_path / "out")],
                    workers=2, ps=1, job_dir=tmp_path / "job", timeout=_TIMEOUT, echo=False, grace_period=60,
                    preload=("tensorflow", "keras"))  # tasks forked from one TensorFlow import
    logs = {task.name: task.log_path.read_text(errors="replace") for task in result.tasks}
    assert result.ok, (result.message, logs.get("chief-0", "")[-3000:])
    assert sorted(task.name for task in result.tasks) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    for task in result.tasks:
        assert (task.exit_code, task.stopped) == (0, False), (task.name, logs[task.name][-2000:])

    chief = json.loads((tmp_path / "out" / "chief-0.json").read_text())
    assert chief["role"] == "chief" and chief["global_step"] == 24  # exactly epochs * steps_per_epoch
    stats = chief["sync_stats"]
    assert stats["replicas_to_aggregate"] == _AGGREGATE and stats["updates"] == 24
    assert stats["contributions"] == _AGGREGATE * 24 + stats["stale"] + stats["pending"]
    assert 0 <= stats["pending"] < _AGGREGATE
    assert "synchronous updates: replicas_to_aggregate=2" in logs["chief-0"]
    losses = chief["history"]["loss"]
    assert len(losses) == 2 and losses[1] < losses[0]
    assert chief["history"]["accuracy"][1] > chief["history"]["accuracy"][0]

    latest = tf.train.latest_checkpoint(str(model_dir))
    assert latest.endswith("ckpt-24")  # checkpoints at 8, 16 and the end: aggregated updates, not contributions
    assert tf.train.load_variable(latest, "global_step/.ATTRIBUTES/VARIABLE_VALUE") == 24
    # One optimizer update per global step: its own counter, racy under async ps, is exact inside the lock.
    assert tf.train.load_variable(latest, "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 24
    learning_rates = [v.simple_value or float(tf.make_ndarray(v.tensor))
                      for name in os.listdir(model_dir / "train")
                      for event in tf.compat.v1.train.summary_iterator(str(model_dir / "train" / name))
                      for v in event.summary.value if v.tag == "learning_rate" and event.step == 24]
    assert learning_rates and learning_rates[-1] == pytest.approx(0.5 * 0.5 ** 2, rel=1e-5)  # decayed per update
    print(f"sync stats {stats}, steps/s per epoch {[round(r['steps_per_sec'], 1) for r in chief['rates']]}")


if __name__ == "__main__":
    _task_main(sys.argv[1:])
