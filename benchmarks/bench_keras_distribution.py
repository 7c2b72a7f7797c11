"""keras.distribution on TensorFlow (``toolkit.enable_keras_distribution``) against its tf.distribute peers.

Three parts, each printing its ratio against the target with met / NOT met:

1. ``mirrored``: one process, 2 logical CPUs, one step per execution (Keras'
   own ``fit`` under MirroredStrategy fails with more on a repeated dataset). A = Keras ``model.fit`` of a
   model built in ``tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"]).scope()``,
   B = the same model and data under ``keras.distribution.DataParallel(devices=
   list_devices())``. Target B/A >= 0.95x.
2. ``multi_worker``: 2 workers from the launcher. A = ``toolkit.fit`` with
   multi_worker_mirrored, B = DataParallel + ``model.fit``, same strategy
   object, data and steps_per_execution. Target B/A >= 0.95x.
3. ``model_parallel``: one process, 2 logical CPUs, an MLP whose largest
   kernel (1024 x 2048) a LayoutMap splits over a 2-device ``model`` axis.
   Targets: the largest variable any device holds <= 0.55x the unsplit kernel,
   and the loss curve equals one device's (same initial weights and batches)
   within 1e-4 relative.

Throughput rows are steps/s, best epoch after a warm-up epoch, sides run ABBA
for ``--rounds`` rounds, means compared. Each part also checks the model
learned (final loss below a quarter of the first). Single runs on a shared
2-core machine scatter by +-30%.

Usage:
    python benchmarks/bench_keras_distribution.py [--part mirrored|multi_worker|model_parallel] [--rounds 2]
                                                  [--steps 200] [--control]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(_REPO))

BATCH, FEATURES, EXAMPLES, EPOCHS, SPE = 64, 32, 8192, 3, 10
_CONTROL = os.environ.get("BENCH_CONTROL") == "1"  # A/A: B runs A's side too, so its ratio is the noise alone


def _data():
    import numpy as np

    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, FEATURES).astype(np.float32)
    return x, (x @ rng.randn(FEATURES, 1)).astype(np.float32)


def _mlp(keras, hidden=64):
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(hidden, activation="relu", name="d1"),
                             keras.layers.Dense(hidden, activation="relu", name="d2"),
                             keras.layers.Dense(1, name="d3")])


def _clock(keras, steps):
    class EpochClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rates, self.start = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(steps / (time.perf_counter() - self.start))

    return EpochClock()


def _abba(rounds, a, b):
    rates = {"A": [], "B": []}
    for run in range(rounds):
        for side in ("AB" if run % 2 == 0 else "BA"):
            rates[side].append((a if side == "A" else b)())
    return rates


def _keras_fit(keras, model, dataset, steps):
    clock = _clock(keras, steps)
    history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    losses = history.history["loss"]
    assert losses[-1] < 0.25 * losses[0], f"did not learn: {losses}"
    return max(clock.rates[1:], default=0.0)


def _mirrored(rounds, steps, out):
    from strategies import configure_local_devices

    configure_local_devices(2)
    import keras
    import tensorflow as tf

    import toolkit

    toolkit.enable_keras_distribution()
    x, y = _data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()
    mirrored = tf.distribute.MirroredStrategy(["/device:CPU:0", "/device:CPU:1"])

    def peer():
        with mirrored.scope():
            model = _mlp(keras)
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        return _keras_fit(keras, model, dataset, steps)

    def ours():
        with keras.distribution.DataParallel(devices=keras.distribution.list_devices()).scope():
            model = _mlp(keras)
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
            assert model.distribute_strategy.num_replicas_in_sync == 2
            return _keras_fit(keras, model, dataset, steps)

    Path(out).write_text(json.dumps(_abba(rounds, peer, peer if _CONTROL else ours)))


def _multi_worker(rounds, steps, out):
    import keras
    import tensorflow as tf

    import toolkit
    from toolkit.data import make_dataset_fn

    toolkit.enable_keras_distribution()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
    strategy = tf.distribute.get_strategy()
    x, y = _data()
    dataset_fn = make_dataset_fn(lambda: tf.data.Dataset.from_tensor_slices((x, y)), BATCH, seed=0)
    chief = [False]

    def peer():
        def model_fn():
            model = _mlp(keras)
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", steps_per_execution=SPE)
            return model

        clock = _clock(keras, steps)
        with tempfile.TemporaryDirectory() as tmp:
            history = toolkit.fit(model_fn, dataset_fn, epochs=EPOCHS, steps_per_epoch=steps, model_dir=tmp,
                                  verbose=0, strategy=strategy, callbacks=[clock],
                                  options=toolkit.FitOptions(checkpoint=toolkit.CheckpointConfig(every=EPOCHS * steps),
                                                             logs=toolkit.LogConfig(summary_every=EPOCHS * steps),
                                                             export=False))
        chief[0] = history.role == "chief"
        return max(clock.rates[1:], default=0.0)  # toolkit.fit runs callbacks on the chief

    def ours():
        model = _mlp(keras)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", steps_per_execution=SPE)
        return _keras_fit(keras, model, dataset_fn, steps)

    rates = _abba(rounds, peer, peer if _CONTROL else ours)
    if chief[0]:
        Path(out).write_text(json.dumps(rates))


def _model_parallel(rounds, steps, out):
    from strategies import configure_local_devices

    configure_local_devices(2)
    import keras
    import numpy as np
    import tensorflow as tf

    import toolkit
    from toolkit.keras_distribution import placement_rows

    toolkit.enable_keras_distribution()
    x, y = _data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()
    keras.utils.set_random_seed(0)
    wide = 2048

    def build():
        return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1024, activation="relu", name="d1"),
                                 keras.layers.Dense(wide, activation="relu", name="big"),
                                 keras.layers.Dense(1, name="d3")])

    one = build()
    start = one.get_weights()
    one.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    one_clock = _clock(keras, steps)
    reference = one.fit(dataset, epochs=EPOCHS, steps_per_epoch=steps, verbose=0,
                        callbacks=[one_clock]).history["loss"]
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], keras.distribution.list_devices())
    layouts = keras.distribution.LayoutMap(mesh)
    layouts[".*/d1/kernel"] = (None, "model")
    layouts[".*/d1/bias"] = ("model",)
    layouts[".*/big/kernel"] = ("model", None)
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layouts))
    split = build()
    for layer, (kernel, bias) in zip(split.layers, zip(start[::2], start[1::2], strict=True), strict=True):
        layer.kernel.assign(kernel)
        layer.bias.assign(bias)
    split.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    clock = _clock(keras, steps)
    losses = split.fit(dataset, epochs=EPOCHS, steps_per_epoch=steps, verbose=0, callbacks=[clock]).history["loss"]
    rows = placement_rows(split)
    largest = max(row["bytes"] for row in rows)
    unsplit = 1024 * wide * 4
    per_device: dict[str, int] = {}
    for row in rows:
        for device in row["devices"]:
            per_device[device] = per_device.get(device, 0) + row["bytes"]
    Path(out).write_text(json.dumps({
        "largest": largest, "unsplit": unsplit, "per_device": per_device, "loss": losses, "reference": reference,
        "max_rel": float(max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))),
        "rate": max(clock.rates[1:]), "one_rate": max(one_clock.rates[1:]), "learned": bool(np.isfinite(losses[-1]))}))


_PARTS = {"mirrored": _mirrored, "multi_worker": _multi_worker, "model_parallel": _model_parallel}


def _ratio(name, rates):
    a, b = rates["A"], rates["B"]
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    ratio = mean_b / mean_a
    runs = "  ".join(f"A {x:6.1f} B {z:6.1f}" for x, z in zip(a, b, strict=True))
    verdict = ("A/A control: any distance from 1.00x is noise" if _CONTROL or os.environ.get("BENCH_CONTROL_PARENT")
               else f"target >= 0.95x: {'met' if ratio >= 0.95 else 'NOT met'}")
    print(f"{name:15s} {runs}   mean A {mean_a:6.1f} B {mean_b:6.1f}   B / A {ratio:.2f}x, {verdict}", flush=True)


def main() -> None:
    from toolkit.launcher import launch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=sorted(_PARTS), action="append", help="only this part (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200, help="steps per epoch (default 200)")
    parser.add_argument("--control", action="store_true",
                        help="A/A control of the throughput parts: B runs A's side too (the ratio is the noise)")
    args = parser.parse_args()
    control = {"BENCH_CONTROL": "1"} if args.control else {}
    if args.control:
        os.environ["BENCH_CONTROL_PARENT"] = "1"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(_REPO), **control)
    with tempfile.TemporaryDirectory(prefix="bench-keras-distribution-") as tmp:
        for part in _PARTS:
            if args.part and part not in args.part:
                continue
            out = Path(tmp) / f"{part}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", part, str(args.rounds), str(args.steps),
                   str(out)]
            if part == "multi_worker":
                result = launch(cmd, job_dir=Path(tmp) / "job", timeout=900, echo=False, workers=2, ps=0,
                                env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(_REPO), **control})
                ok = result.ok
            else:
                ok = subprocess.run(cmd, env=env, timeout=900, check=False).returncode == 0
            if not ok or not out.exists():
                print(f"{part}: failed", file=sys.stderr)
                continue
            found = json.loads(out.read_text())
            if part != "model_parallel":
                _ratio(f"{part} (A = {'MirroredStrategy' if part == 'mirrored' else 'toolkit.fit MWMS'})", found)
                continue
            share = found["largest"] / found["unsplit"]
            print(f"model_parallel  largest variable on any device {found['largest']:,} B = {share:.2f}x the "
                  f"unsplit kernel ({found['unsplit']:,} B), target <= 0.55x: {'met' if share <= 0.55 else 'NOT met'};"
                  f" bytes per device {found['per_device']}")
            print(f"model_parallel  loss {[round(v, 5) for v in found['loss']]} vs one device "
                  f"{[round(v, 5) for v in found['reference']]}: max relative difference {found['max_rel']:.1e}, "
                  f"target <= 1e-4: {'met' if found['max_rel'] <= 1e-4 else 'NOT met'}; "
                  f"{found['rate']:.1f} steps/s split, "
                  f"{found['one_rate']:.1f} on one device")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _PARTS[sys.argv[2]](int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
