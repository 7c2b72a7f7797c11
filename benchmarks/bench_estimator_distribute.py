"""The Estimator under ``RunConfig(train_distribute=...)`` against ``toolkit.fit`` under the same strategy.

The small model of bench_training.py (MLP 32 -> 64 -> 64 -> 1, MSE, Adam 1e-3, global batch 64,
synthetic data), one run each:

* ``estimator/mirrored``: a TF1 ``model_fn`` (the same MLP, ``AdamOptimizer``) under
  ``MirroredStrategy`` on 2 logical CPUs, per-replica batch 32 (the Estimator's input_fn batch is
  per replica), against ``toolkit/mirrored/spe1`` (bench_training's ``toolkit.fit(strategy="mirrored")``);
* ``estimator/multi_worker_mirrored``: the same under ``MultiWorkerMirroredStrategy`` on 2 workers
  (workers-only TF_CONFIG, started by ``toolkit.launcher``), against ``toolkit/multi_worker_mirrored/spe1``.

Each reports the best of its later chunks of ``--steps`` steps (the first warms up), and the
Estimator's held-out loss after training (it must learn: below the labels' variance). Target: each
Estimator figure >= 0.9x its toolkit.fit peer. Not a test; compare ratios from one run.

Usage:
    python benchmarks/bench_estimator_distribute.py [--steps 300] [--only mirrored multi_worker_mirrored]
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
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

PER_REPLICA, FEATURES, EXAMPLES, CHUNKS = 32, 32, 8192, 3


def _child(kind: str, steps: int, model_dir: str, out: str) -> None:
    import numpy as np
    import tensorflow as tf

    if kind == "mirrored":
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                                   [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    from toolkit import estimator as tf_estimator

    v1 = tf.compat.v1
    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, FEATURES).astype(np.float32)
    y = (x @ rng.randn(FEATURES, 1)).astype(np.float32)

    def model_fn(features, labels, mode):
        out = features
        for i, width in enumerate((64, 64, 1)):
            kernel = v1.get_variable(f"dense{i}/kernel", [out.shape[-1], width],
                                     initializer=v1.glorot_uniform_initializer())
            out = tf.matmul(out, kernel) + v1.get_variable(f"dense{i}/bias", [width],
                                                           initializer=v1.zeros_initializer())
            out = tf.nn.relu(out) if width > 1 else out
        loss = v1.losses.mean_squared_error(labels, out)
        train_op = v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=v1.train.get_global_step())
        return tf_estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(input_context=None):
        data = tf.data.Dataset.from_tensor_slices((x, y))
        if input_context is not None and input_context.num_input_pipelines > 1:
            data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return data.shuffle(1024, seed=0).repeat().batch(PER_REPLICA).prefetch(2)

    class Clock(v1.train.SessionRunHook):
        def __init__(self):
            self.count, self.start, self.rates = 0, time.perf_counter(), []

        def after_run(self, run_context, run_values):
            self.count += 1
            if self.count % steps == 0:
                now = time.perf_counter()
                self.rates.append(steps / (now - self.start))
                self.start = now

    clock = Clock()
    config = tf_estimator.RunConfig(train_distribute=strategy, save_checkpoints_steps=CHUNKS * steps,
                                    save_summary_steps=CHUNKS * steps, log_step_count_steps=CHUNKS * steps)
    est = tf_estimator.Estimator(model_fn, model_dir=model_dir, config=config)
    est.train(input_fn, hooks=[clock], max_steps=CHUNKS * steps)
    if not est.config.is_chief:
        return
    held_out = est.evaluate(
        lambda: tf.data.Dataset.from_tensor_slices((x[-1024:], y[-1024:])).batch(256))
    Path(out).write_text(json.dumps({"steps_per_sec": max(clock.rates[1:]), "loss": held_out["loss"],
                                     "label_variance": float(np.var(y))}))


def _estimator(kind: str, steps: int, work: Path) -> dict | None:
    from toolkit.launcher import launch

    out = work / f"estimator-{kind}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--steps", str(steps),
           "--model-dir", str(work / f"est-{kind}"), "--out", str(out)]
    quiet = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(_REPO)}
    if kind == "mirrored":
        env = {**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, **quiet}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=_REPO)
        if proc.returncode:
            print(f"  estimator/{kind} failed:\n{proc.stderr[-1500:]}", file=sys.stderr)
    else:
        result = launch(cmd, job_dir=work / "est-mwms-job", timeout=900, echo=False, env=quiet, workers=2)
        if not result.ok:
            print(f"  estimator/{kind} failed: {result.message}", file=sys.stderr)
    return json.loads(out.read_text()) if out.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--only", nargs="*", default=["mirrored", "multi_worker_mirrored"])
    parser.add_argument("--child")
    parser.add_argument("--model-dir")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.steps, args.model_dir, args.out)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_training

    print(f"load before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases = bench_training._cases(args.steps)
        for kind in args.only:
            peer_name = f"toolkit/{kind}/spe1"
            peer = bench_training._measure(peer_name, *cases[peer_name], args.steps, work)
            mine = _estimator(kind, args.steps, work)
            rate = mine["steps_per_sec"] if mine else None
            ratio = f"{rate / peer:.2f}x" if rate and peer else "n/a"
            met = "met" if rate and peer and rate / peer >= 0.9 else "NOT MET"
            learned = (f"held-out loss {mine['loss']:.3f} (label variance {mine['label_variance']:.2f})"
                       if mine else "")
            print(f"estimator/{kind}: {rate or 0:.0f} steps/s vs {peer_name}: {peer or 0:.0f} steps/s = {ratio} "
                  f"(target >= 0.9x: {met}); {learned}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
