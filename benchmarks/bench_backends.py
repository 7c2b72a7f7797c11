"""The same digits parameter-server job on the local launcher, on a 3-node Slurm cluster and on a 3-node Ray cluster.

1 chief + 2 workers + 1 ps train the digits MLP with ``toolkit.fit`` (the
entrypoint of ``bench_ray.py``) on each backend, in one run:
``toolkit.launcher.launch``, ``toolkit.launcher.slurm.launch_slurm`` (a real
slurmctld with 3 slurmd nodes, each in its own network and UTS namespace:
``tests/_slurm_cluster.py``; needs root and Debian's slurm-wlm) and
``toolkit.launcher.ray.launch_ray`` (a ``ray.cluster_utils.Cluster``: a head
and 2 more nodes on this machine). Local and Slurm runs alternate
(``--runs`` of each: local, slurm, local, slurm, ...), so that the load other
work puts on the machine falls on both alike; the medians are compared. For
each run it prints:

- submit to first step: seconds from the launch call to the chief's first
  training step, split into the engine's part (launch call to the chief's
  process running its first line: for Slurm, sbatch, scheduling, srun and the
  task wrapper) and the task's own part (TensorFlow import, servers, data);
- steps/s: the median of the chief's per-epoch ``steps_per_sec`` after the first epoch;
- the whole job's wall time, and the load average (1 min) before the run.

The Slurm cluster runs one throwaway job before the measured runs: the first
job after slurmctld starts waits for its first scheduling pass (about 2 s),
which a cluster in service has long passed. Then the ratios against the
targets: Slurm >= 0.9x local steps/s, Slurm submit to first step <= 1.5x
local. Not a test: timings on a shared machine are noisy.

Usage:
    python benchmarks/bench_backends.py [--epochs 6] [--runs 2] [--backends local,slurm,ray]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT / "benchmarks"), str(_ROOT / "tests")]

from _slurm_cluster import SlurmCluster, unavailable_reason  # noqa: E402
from bench_ray import _ENTRYPOINT, _run  # noqa: E402


def _slurm_launcher(cmd, *, workers, ps, job_dir, echo, timeout):
    from toolkit.launcher import LaunchSpec
    from toolkit.launcher.slurm import SlurmOptions, launch_slurm

    spec = LaunchSpec(cmd=tuple(cmd), workers=workers, ps=ps, timeout=timeout)
    return launch_slurm(spec, job_dir=job_dir, stream=sys.stdout if echo else None,
                        options=SlurmOptions(nodes=3, shared_dirs=True))


def _warm_up(env: dict[str, str]) -> float:
    """One throwaway job on the fresh cluster (its first scheduling pass); returns its seconds."""
    started = time.time()
    subprocess.run(["srun", "-N3", "-n3", "true"], env=env, check=True, capture_output=True, timeout=120)
    return time.time() - started


def _row(name: str, m: dict[str, float]) -> str:
    return (f"{name:8s} {m['startup']:10.1f} {m['to_process']:8.1f} {m['in_process']:8.1f} "
            f"{m['steps_per_sec']:9.0f} {m['wall']:8.1f} {m['load']:6.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2, help="runs of each of local and Slurm, alternating")
    parser.add_argument("--backends", default="local,slurm,ray", help="which of local, slurm and ray to run")
    args = parser.parse_args()
    backends = set(args.backends.split(","))
    if backends - {"local", "slurm", "ray"}:
        raise SystemExit(f"--backends is {args.backends!r}; expected names among local, slurm, ray")
    reason = unavailable_reason(netns=True) if "slurm" in backends else None
    if reason:
        raise SystemExit(f"cannot start a Slurm cluster here: {reason}")
    from toolkit.launcher import launch

    rows: dict[str, list[dict[str, float]]] = {}
    failed: dict[str, str] = {}

    def measure(name: str, launcher, run: int) -> None:
        load = os.getloadavg()[0]
        try:
            row = _run(f"{name}-{run}", launcher, work, args.epochs)
            rows.setdefault(name, []).append({**row, "load": load})
            print(_row(f"{name}", rows[name][-1]), flush=True)
        except (SystemExit, RuntimeError, AttributeError, OSError) as exc:  # report it and measure the others
            failed[name] = f"{type(exc).__name__}: {exc}"
            print(f"{name}: {failed[name]}", flush=True)

    with tempfile.TemporaryDirectory(prefix="tfdist-bench-backends-") as tmp:
        work = Path(tmp)
        (work / "digits_ps.py").write_text(_ENTRYPOINT.format(root=str(_ROOT)))
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
        slurm = None
        if "slurm" in backends:
            started = time.time()
            slurm = SlurmCluster(3, netns=True).start()
            os.environ["SLURM_CONF"] = slurm.env["SLURM_CONF"]
            print(f"3-node Slurm cluster up in {time.time() - started:.1f} s, its first job took "
                  f"{_warm_up({**os.environ}):.1f} s (neither counted below)", flush=True)
        print(f"{'backend':8s} {'submit->1st step s':>10s} {'engine s':>8s} {'task s':>8s} {'steps/s':>9s} "
              f"{'wall s':>8s} {'load':>6s}", flush=True)
        try:
            for run in range(args.runs):
                if "local" in backends:
                    measure("local", launch, run)
                if slurm is not None:
                    measure("slurm", _slurm_launcher, run)
        finally:
            if slurm is not None:
                slurm.stop()
        if "ray" in backends:
            _measure_ray(work, measure)
    print(f"digits PS job, 1 chief + 2 workers + 1 ps, {args.epochs} epochs, {args.runs} run(s) each (medians)")
    median = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rows.items()}
    for name, m in median.items():
        print(_row(name, m))
    for name, error in failed.items():
        print(f"{name:8s} failed: {error}")
    for name in [n for n in ("slurm", "ray") if n in median and "local" in median]:
        speed = median[name]["steps_per_sec"] / median["local"]["steps_per_sec"]
        startup = median[name]["startup"] / median["local"]["startup"]
        print(f"{name}/local steps/s: {speed:.2f}x (target >= 0.9x)   "
              f"submit to first step: {startup:.2f}x (target <= 1.5x)")
    return 0


def _measure_ray(work: Path, measure) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from toolkit.launcher.ray import launch_ray
    from toolkit.launcher.ray._cluster import agent_ports

    os.environ["RAY_TMPDIR"] = str(work / "ray")
    (work / "ray").mkdir()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False,
                                                            **agent_ports()})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=4, **agent_ports())
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="tfdist", log_to_driver=False)
        measure("ray", launch_ray, 0)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
