"""The same ``fit`` call under default, one_device and mirrored (2 logical CPUs).

Logical CPUs must be configured before TensorFlow initialises its devices, so
the training runs in a fresh interpreter: this file is also that child's
script (``python test_training_local_strategies.py OUT_DIR``).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np

STRATEGIES = {"default": None, "one_device": None, "mirrored": {"logical_cpus": 2}}


def _child(out_dir: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from strategies import configure_local_devices

    configure_local_devices(2)
    import keras

    import models
    from strategies import StrategyOptions
    from toolkit import data, fit
    from toolkit.training import FitOptions

    def model_fn():
        model = models.digits_mlp(seed=3)
        model.compile(optimizer=keras.optimizers.SGD(0.2, momentum=0.9), metrics=["accuracy"], steps_per_execution=4,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    train = data.load("digits")
    results = {}
    for name, options in STRATEGIES.items():
        history = fit(model_fn, train.dataset_fn(64, seed=4), strategy=name, epochs=2, steps_per_epoch=10,
                      model_dir=os.path.join(out_dir, name), verbose=0,
                      options=FitOptions(strategy=StrategyOptions(**(options or {})), export=False))
        np.savez(os.path.join(out_dir, f"{name}.npz"), *history.model.get_weights())
        results[name] = {"loss": history["loss"], "accuracy": history["accuracy"], "step": history.global_step}
    results["make_train_step"] = _hand_loop_steps()
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh)


def _hand_loop_steps() -> float:
    """``toolkit.layers.make_train_step`` under ``strategy.run``: 2 replicas vs one process, same batches.

    Returns the largest weight difference after 5 steps.
    """
    import keras
    import tensorflow as tf

    import models
    from toolkit.layers import SparseSGD, make_train_step

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(320, 8, 8, 1)).astype("float32"), rng.integers(0, 10, 320)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    weights = {}
    for name, strategy in (("default", tf.distribute.get_strategy()),
                           ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        with strategy.scope():
            model = models.digits_mlp(seed=5)
            step = make_train_step(model, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                   optimizer=keras.optimizers.SGD(0.5), sparse_optimizer=SparseSGD())
        for batch in strategy.experimental_distribute_dataset(dataset):
            strategy.run(step, args=batch)
        weights[name] = model.get_weights()
    return max(float(np.abs(a - b).max()) for a, b in zip(weights["default"], weights["mirrored"], strict=False))


def _weights(path):
    with np.load(path) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


def test_same_code_same_result_under_every_local_strategy(tmp_path, no_orphans):
    proc = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=240,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "strategy mirrored" in proc.stderr and "local CPU split into 2 logical devices" in proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    # the sharded-embedding step averages over the global batch too: 2 replicas take one process's step
    assert results.pop("make_train_step") < 1e-5
    assert {r["step"] for r in results.values()} == {20}
    assert results["default"]["loss"][1] < results["default"]["loss"][0]
    reference = _weights(tmp_path / "default.npz")
    for name in ("one_device", "mirrored"):
        # Two replicas with half batches each and summed gradients take the global-batch step.
        np.testing.assert_allclose(results[name]["loss"], results["default"]["loss"], rtol=1e-5)
        np.testing.assert_allclose(results[name]["accuracy"], results["default"]["accuracy"], atol=1e-6)
        for got, want in zip(_weights(tmp_path / f"{name}.npz"), reference, strict=False):
            np.testing.assert_allclose(got, want, atol=1e-5)


if __name__ == "__main__":
    _child(sys.argv[1])
