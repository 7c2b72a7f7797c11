"""The same digits parameter-server job on the local launcher and on a 3-node Ray cluster.

Starts a ``ray.cluster_utils.Cluster`` (a head and 2 more nodes, all on this
machine, Ray's files in a temporary directory) and runs 1 chief + 2 workers +
1 ps training the digits MLP with ``toolkit.fit`` (the example trainer's
model, data and optimizer), first with ``toolkit.launcher.launch``, then with
``toolkit.launcher.ray.launch_ray``. For each it prints:

- start-up: seconds from the launch call to the chief's first training step
  (task processes, TensorFlow import, servers, placement on Ray);
- steps/s: the median of the chief's per-epoch ``steps_per_sec`` after the first
  epoch (which traces);
- the whole job's wall time.

Then the ratios, against the targets Ray >= 0.9x local steps/s and Ray
start-up <= 2x local. Not a test: timings on a shared machine are noisy.
The cluster is shut down through its own handle (never ``ray stop``, which
would end every Ray cluster on the machine).

Usage:
    python benchmarks/bench_ray.py [--epochs 6] [--runs 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_ENTRYPOINT = """\
import json, os, sys, time
script_started = time.time()                 # before any import: the engine's part of the start-up ends here
sys.path.insert(0, {root!r})
from strategies import run_role
run_role()                                   # ps and workers serve until the chief's goodbye
import keras
from models import digits_mlp
from toolkit import data, fit
from toolkit.training import FitOptions
epochs, out = int(sys.argv[1]), sys.argv[2]
train = data.load("digits", split="train")
def model_fn():
    model = digits_mlp(hidden_units=(64, 64), seed=0)
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=5)
    return model
started = time.time()
history = fit(model_fn, train.dataset_fn(64, seed=0), epochs=epochs,
              steps_per_epoch=train.steps_per_epoch(64) * 4,
              model_dir=os.path.join(os.environ["TFDIST_JOB_DIR"], "model"), verbose=0,
              options=FitOptions(export=False))
rates = [r["steps_per_sec"] for r in history.rates[1:]]
with open(out, "w") as fh:
    json.dump({{"script_started": script_started, "fit_called": started, "steps_per_sec": rates}}, fh)
"""




def _run(name: str, launcher, work: Path, epochs: int, **kwargs) -> dict[str, float]:
    script = work / "digits_ps.py"
    out = work / f"{name}.json"
    started = time.time()
    result = launcher(["python", str(script), str(epochs), str(out)], workers=2, ps=1, job_dir=work / name,
                      echo=False, timeout=900, **kwargs)
    wall = time.time() - started
    if not result.ok:
        raise SystemExit(f"{name}: {result.message}")
    doc = json.loads(out.read_text())
    # The chief calls fit once its servers are up; the first step follows within milliseconds.
    return {"startup": doc["fit_called"] - started, "steps_per_sec": statistics.median(doc["steps_per_sec"]),
            "wall": wall, "to_process": doc["script_started"] - started,
            "in_process": doc["fit_called"] - doc["script_started"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    from toolkit.launcher import launch
    from toolkit.launcher.ray import launch_ray
    from toolkit.launcher.ray._cluster import agent_ports

    with tempfile.TemporaryDirectory(prefix="tfdist-bench-ray-") as tmp:
        work = Path(tmp)
        (work / "digits_ps.py").write_text(_ENTRYPOINT.format(root=str(_ROOT)))
        os.environ["RAY_TMPDIR"] = str(work / "ray")
        (work / "ray").mkdir()
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
        cluster_started = time.time()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False,
                                                                **agent_ports()})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=4, **agent_ports())
            cluster.wait_for_nodes()
            print(f"3-node Ray cluster up in {time.time() - cluster_started:.1f} s (not counted below)", flush=True)
            ray.init(address=cluster.address, namespace="tfdist", log_to_driver=False)
            rows: dict[str, list[dict[str, float]]] = {"local": [], "ray": []}
            for run in range(args.runs):
                rows["local"].append(_run(f"local-{run}", launch, work, args.epochs))
                rows["ray"].append(_run(f"ray-{run}", launch_ray, work, args.epochs))
        finally:
            ray.shutdown()
            cluster.shutdown()
    median = {k: {m: statistics.median(r[m] for r in v) for m in ("startup", "steps_per_sec", "wall")}
              for k, v in rows.items()}
    print(f"digits PS job, 1 chief + 2 workers + 1 ps, {args.epochs} epochs, {args.runs} run(s) each")
    print(f"{'backend':8s} {'start-up s':>11s} {'steps/s':>9s} {'wall s':>8s}")
    for name, m in median.items():
        print(f"{name:8s} {m['startup']:11.1f} {m['steps_per_sec']:9.0f} {m['wall']:8.1f}")
    speed = median["ray"]["steps_per_sec"] / median["local"]["steps_per_sec"]
    startup = median["ray"]["startup"] / median["local"]["startup"]
    print(f"ray/local steps/s: {speed:.2f}x (target >= 0.9x)   ray/local start-up: {startup:.2f}x (target <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
