"""Where the parameter server becomes the bottleneck: ``toolkit.fit`` steps/s by cluster shape.

A 4.2M-parameter MLP (1024 -> 2048 -> 1024 -> 1, no biases, so that
ParameterServerStrategy's round-robin placement puts one big kernel on each of
two ps), a batch of 32 per step (each step is one worker's), synthetic data, Adam. Every step a worker reads
every variable from the ps and sends back a gradient of the same size, so the
variables' I/O, not the arithmetic, dominates. Measured for 1, 2 and 4 workers on
1 ps, and for 1 and 2 ps with 2 workers (each cluster also has its chief, the
coordinator), with ``steps_per_execution`` 32 (the coordinator's setting).

Prints steps/s, examples/s, the speed-up over one worker, and an estimate of each
ps's network traffic per step: the bytes of the trainable variables placed on it,
twice (read by the forward pass, a gradient back). Optimizer slots stay on the ps
and never cross the network. Each shape runs in fresh processes
(``toolkit.launcher``) and reports its best epoch after a warm-up epoch.

Not a test: on a shared machine the figures move by +-30%; the load average is
printed with each. On a 2-core machine 4 workers (6 processes) oversubscribe the
CPU, so that row measures contention as much as the ps.

Usage:
    python benchmarks/bench_scaling.py [--steps 60] [--only 1w1ps 2w2ps]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(_REPO))

BATCH, FEATURES, HIDDEN, EXAMPLES, EPOCHS = 32, 1024, (2048, 1024), 4096, 3
#: steps per closure the chief schedules on a worker (the coordinator's fastest setting in RESULTS.md)
STEPS_PER_EXECUTION = 32
# (workers, ps) shapes; the scaling target: workers on 1 ps, then a second ps.
SHAPES = {"1w1ps": (1, 1), "2w1ps": (2, 1), "4w1ps": (4, 1), "2w2ps": (2, 2)}
# A shape "scales" when it reaches this share of the ideal speed-up (linear in workers).
_SCALING_TARGET = 0.8


# ------------------------------------------------------------------- child: one cluster's chief

def _model():
    import keras

    layers = [keras.layers.Dense(width, activation="relu", use_bias=False) for width in HIDDEN]
    return keras.Sequential([keras.Input((FEATURES,)), *layers, keras.layers.Dense(1, use_bias=False)])


def _dataset_fn():
    import numpy as np
    import tensorflow as tf

    from toolkit.data import make_dataset_fn

    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, FEATURES).astype(np.float32)
    y = (x[:, :8].sum(axis=1, keepdims=True) > 0).astype(np.float32)
    # Under parameter servers a step is one worker's step on one batch (num_replicas_in_sync is 1), so the
    # global batch is BATCH whatever the number of workers.
    return make_dataset_fn(lambda: tf.data.Dataset.from_tensor_slices((x, y)), BATCH, seed=0)


def _child(argv) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--model-dir", required=True)
    args = parser.parse_args(argv)
    from strategies import run_role

    run_role()  # ps and workers serve here (before Keras is imported) and exit
    import keras

    from toolkit import fit
    from toolkit.training import CheckpointConfig, FitOptions, LogConfig

    # The workers only serve (run_role above), so the chief coordinates their steps, many per closure.
    def model_fn():
        model = _model()
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                      steps_per_execution=STEPS_PER_EXECUTION)
        return model

    history = fit(model_fn, _dataset_fn(), epochs=EPOCHS, steps_per_epoch=args.steps,
                  model_dir=args.model_dir, verbose=0,
                  options=FitOptions(logs=LogConfig(every=args.steps, summary_every=EPOCHS * args.steps),
                                     checkpoint=CheckpointConfig(every=EPOCHS * args.steps), export=False))
    best = max(history.rates[1:], key=lambda rate: rate["steps_per_sec"])
    per_ps: dict[str, int] = {}
    for variable in history.model.trainable_variables:
        device = str(getattr(variable, "value", variable).device)  # a Keras variable wraps a tf.Variable
        task = device.split("/task:")[1].split("/")[0] if "/job:ps" in device else "?"
        per_ps[task] = per_ps.get(task, 0) + int(variable.numpy().nbytes)
    Path(args.out).write_text(json.dumps({"steps_per_sec": best["steps_per_sec"],
                                          "examples_per_sec": best["examples_per_sec"],
                                          "params": int(history.model.count_params()),
                                          "bytes_per_ps": per_ps}))


# ------------------------------------------------------------------- parent: one cluster per shape

def _measure(name: str, workers: int, ps: int, steps: int, work: Path) -> dict | None:
    from toolkit.launcher import launch

    out = work / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--out", str(out), "--steps", str(steps),
           "--model-dir", str(work / name / "model")]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(_REPO)}
    result = launch(cmd, chief=1, workers=workers, ps=ps, job_dir=work / name / "job", timeout=1200, echo=False,
                    env=env)
    if not result.ok:
        print(f"  {name} failed: {result.message}", file=sys.stderr)
    return json.loads(out.read_text()) if out.exists() else None


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch (3 epochs, the first a warm-up)")
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(SHAPES))
    args = parser.parse_args()
    names = args.only or list(SHAPES)
    print(f"{os.cpu_count()} CPU cores; model {FEATURES}->{'->'.join(map(str, HIDDEN))}->1, batch {BATCH} per step "
          f"(one worker's), steps_per_execution {STEPS_PER_EXECUTION}")
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-scaling-") as tmp:
        for name in names:
            workers, ps = SHAPES[name]
            result = _measure(name, workers, ps, args.steps, Path(tmp))
            if result is None:
                continue
            rows[name] = result
            rate = result["steps_per_sec"]
            per_ps = ", ".join(f"ps{task} {2 * size / 2**20:.1f} MiB/step ({2 * size * rate / 2**20:.0f} MiB/s)"
                               for task, size in sorted(result["bytes_per_ps"].items()))
            print(f"{name:6s} {workers} worker(s) {ps} ps: {result['steps_per_sec']:7.1f} steps/s "
                  f"{result['examples_per_sec']:8.0f} examples/s  [{per_ps}]  "
                  f"({result['params'] / 1e6:.1f}M params; load {_load()})", flush=True)
    base = rows.get("1w1ps")
    if base:
        print("speed-up over 1 worker on 1 ps (ideal = number of workers):")
        for name, row in rows.items():
            workers, ps = SHAPES[name]
            speedup = row["steps_per_sec"] / base["steps_per_sec"]
            met = "met" if speedup >= _SCALING_TARGET * workers else "NOT MET"
            print(f"  {name:6s} {speedup:5.2f}x  ({speedup / workers:.0%} of ideal; target >= "
                  f"{_SCALING_TARGET:.0%}: {met})")
    if "2w1ps" in rows and "2w2ps" in rows:
        gain = rows["2w2ps"]["steps_per_sec"] / rows["2w1ps"]["steps_per_sec"]
        print(f"a second ps with 2 workers: {gain:.2f}x the steps/s of one ps "
              f"({'the ps was a bottleneck' if gain >= 1.15 else 'the ps was not the bottleneck here'})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
    else:
        main()
