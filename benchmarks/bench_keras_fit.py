"""Keras' own ``model.fit`` through ``enable_distributed_keras`` next to ``toolkit.fit``, same cluster, one run.

The small model of FINDINGS.md (MLP 32 -> 64 -> 64 -> 1, MSE, Adam, global
batch 64, synthetic data). For each multi-worker strategy one cluster is
launched (MultiWorkerMirrored: 2 workers; ParameterServer: chief, 2 workers,
1 ps), and in that job every task trains the same model on the same input
pipeline and ``steps_per_execution`` with ``toolkit.fit`` (A) and with
``model.compile(...)`` + ``model.fit(...)`` (B), in the order ABBA ABBA... for
``--rounds`` rounds (``--keras-first``: BAAB...). Later training runs in a
process tend to be slower than earlier ones, whichever side runs (on one
MultiWorkerMirrored cluster the first of four was the fastest and the last
the slowest in both orders), so a fixed ABAB order charges that drift to B;
ABBA gives both sides the same mean position. Both
go through the same engine, so the ratio is the cost of the Keras wrapper
(target >= 0.95x). Each run's figure is its best epoch after a warm-up epoch,
timed by the same Keras callback; the ratio compares the means of each side's
runs (and, printed beside it, their best). Not a test: on a shared machine
single runs scatter by +-30%; ``--control`` is the A/A control (B runs
``toolkit.fit`` too), whose ratio is what that noise alone gives.

Usage:
    python benchmarks/bench_keras_fit.py [--steps 300] [--spe 10] [--rounds 2] [--keras-first] [--control]
                                         [--strategy multi_worker_mirrored|parameter_server]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(_REPO))

BATCH, FEATURES, EXAMPLES, EPOCHS = 64, 32, 8192, 3
_CLUSTERS: dict[str, dict[str, Any]] = {"multi_worker_mirrored": {"workers": 2},
                                         "parameter_server": {"chief": 1, "workers": 2, "ps": 1}}


def _child(argv) -> None:
    """One task of the job: toolkit.fit, then Keras' model.fit, on one strategy."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--spe", type=int, required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--keras-first", action="store_true")
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--control", action="store_true")
    args = parser.parse_args(argv)

    from strategies import make_strategy, run_role

    run_role()  # parameter-server ps and workers serve here
    import keras
    import numpy as np
    import tensorflow as tf

    import toolkit
    from toolkit.data import make_dataset_fn

    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, FEATURES).astype(np.float32)
    y = (x @ rng.randn(FEATURES, 1)).astype(np.float32)
    dataset_fn = make_dataset_fn(lambda: tf.data.Dataset.from_tensor_slices((x, y)), BATCH, seed=0)

    class EpochClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rates, self.start = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(args.steps / (time.perf_counter() - self.start))

    def model():
        return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                                 keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])

    strategy = make_strategy()
    toolkit.enable_distributed_keras()
    rates: dict[str, list[float]] = {"toolkit.fit": [], "model.fit": []}

    def model_fn():
        compiled = model()
        compiled.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", steps_per_execution=args.spe)
        return compiled

    def engine(run, side="toolkit.fit"):
        clock = EpochClock()
        history = toolkit.fit(model_fn, dataset_fn, epochs=EPOCHS, steps_per_epoch=args.steps,
                              model_dir=f"{args.model_dir}-{run}-{side}", verbose=0, strategy=strategy,
                              callbacks=[clock],
                              options=toolkit.FitOptions(checkpoint=toolkit.CheckpointConfig(every=EPOCHS * args.steps),
                                                         logs=toolkit.LogConfig(summary_every=EPOCHS * args.steps),
                                                         export=False))
        rates[side].append(max(clock.rates[1:], default=0.0))  # callbacks run on the chief
        return history.role == "chief"

    def keras_fit(run):
        if args.control:  # A/A: the same door on both sides
            engine(run, side="model.fit")
            return
        clock = EpochClock()
        with strategy.scope():
            keras_model = model()
            keras_model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", steps_per_execution=args.spe)
        keras_model.fit(dataset_fn, epochs=EPOCHS, steps_per_epoch=args.steps, verbose=0, callbacks=[clock])
        rates["model.fit"].append(max(clock.rates[1:], default=0.0))

    chief = False
    for run in range(args.rounds):
        if args.keras_first != (run % 2 == 1):  # ABBA...: both sides get the same mean position
            keras_fit(run)
            chief = engine(run)
        else:
            chief = engine(run)
            keras_fit(run)
    if chief:
        Path(args.out).write_text(json.dumps(rates))


def main() -> None:
    from toolkit.launcher import launch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="steps per epoch (default 300)")
    parser.add_argument("--spe", type=int, default=10, help="steps_per_execution of both (default 10)")
    parser.add_argument("--keras-first", action="store_true",
                        help="BAAB: model.fit first in the first round (the default is ABBA)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, interleaved (default 2)")
    parser.add_argument("--control", action="store_true",
                        help="A/A control: B runs toolkit.fit as well, so the ratio shows the noise alone")
    parser.add_argument("--strategy", choices=sorted(_CLUSTERS), action="append",
                        help="only this strategy (repeatable; default: both)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    pair = "BA" if args.keras_first else "AB"
    order = "".join(pair if run % 2 == 0 else pair[::-1] for run in range(args.rounds))
    print(f"steps/s, best of epochs 2-{EPOCHS}, {args.steps} steps per epoch, steps_per_execution {args.spe}, "
          f"A = toolkit.fit, B = {'toolkit.fit again (A/A control)' if args.control else 'model.fit'}, order {order}")
    with tempfile.TemporaryDirectory(prefix="bench-keras-fit-") as tmp:
        for strategy, shape in _CLUSTERS.items():
            if args.strategy and strategy not in args.strategy:
                continue
            out = Path(tmp) / f"{strategy}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--out", str(out), "--steps",
                   str(args.steps), "--spe", str(args.spe), "--model-dir", str(Path(tmp) / strategy / "model"),
                   "--rounds", str(args.rounds), *(["--keras-first"] if args.keras_first else []),
                   *(["--control"] if args.control else [])]
            started = time.perf_counter()
            result = launch(cmd, job_dir=Path(tmp) / strategy / "job", timeout=900, echo=False,
                            env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(_REPO)}, **shape)
            if not result.ok or not out.exists():
                print(f"{strategy:24s} failed: {result.message}", file=sys.stderr)
                continue
            rates = json.loads(out.read_text())
            engine, keras = rates["toolkit.fit"], rates["model.fit"]
            mean_a, mean_b = sum(engine) / len(engine), sum(keras) / len(keras)
            ratio, best = mean_b / mean_a, max(keras) / max(engine)
            runs = "  ".join(f"A {a:6.1f} B {b:6.1f}" for a, b in zip(engine, keras, strict=True))
            verdict = ("A/A control: any distance from 1.00x is noise" if args.control
                       else f"target >= 0.95x: {'met' if ratio >= 0.95 else 'NOT met'}")
            print(f"{strategy:22s} {runs}   mean: A {mean_a:6.1f} B {mean_b:6.1f}   B / A {ratio:.2f}x "
                  f"(best {best:.2f}x), {verdict}   ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
    else:
        main()
