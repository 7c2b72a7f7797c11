"""The same digits parameter-server job on the local launcher, on a 3-node Ray cluster and on a 3-node Slurm cluster.

1 chief + 2 workers + 1 ps train the digits MLP with ``toolkit.fit`` (the
entrypoint of ``bench_ray.py``), once per backend, in one run:
``toolkit.launcher.launch``, ``toolkit.launcher.ray.launch_ray`` (a
``ray.cluster_utils.Cluster``: a head and 2 more nodes on this machine) and
``toolkit.launcher.slurm.launch_slurm`` (a real slurmctld with 3 slurmd nodes,
each in its own network and UTS namespace: ``tests/_slurm_cluster.py``; needs
root and Debian's slurm-wlm). For each it prints:

- submit to first step: seconds from the launch call to the chief's first
  training step (for Slurm: sbatch, scheduling, srun, TensorFlow import, servers);
- steps/s: the median of the chief's per-epoch ``steps_per_sec`` after the first epoch;
- the whole job's wall time.

Then the ratios against the targets: Slurm >= 0.9x local steps/s, Slurm submit to
first step <= 1.5x local. Not a test: timings on a shared machine are noisy.

Usage:
    python benchmarks/bench_backends.py [--epochs 6]
"""
from __future__ import annotations

import argparse
import os
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    reason = unavailable_reason(netns=True)
    if reason:
        raise SystemExit(f"cannot start a Slurm cluster here: {reason}")
    import ray
    from ray.cluster_utils import Cluster

    from toolkit.launcher import launch
    from toolkit.launcher.ray import launch_ray
    from toolkit.launcher.ray._cluster import agent_ports

    rows: dict[str, dict[str, float]] = {}
    failed: dict[str, str] = {}

    def measure(name: str, launcher) -> None:
        try:
            rows[name] = _run(name, launcher, work, args.epochs)
        except (SystemExit, RuntimeError, AttributeError, OSError) as exc:  # report it and measure the others
            failed[name] = f"{type(exc).__name__}: {exc}"
        print(f"{name}: {rows.get(name) or failed[name]}", flush=True)

    with tempfile.TemporaryDirectory(prefix="tfdist-bench-backends-") as tmp:
        work = Path(tmp)
        (work / "digits_ps.py").write_text(_ENTRYPOINT.format(root=str(_ROOT)))
        os.environ["RAY_TMPDIR"] = str(work / "ray")
        (work / "ray").mkdir()
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
        measure("local", launch)
        started = time.time()
        slurm = SlurmCluster(3, netns=True).start()
        print(f"3-node Slurm cluster up in {time.time() - started:.1f} s (not counted below)", flush=True)
        os.environ["SLURM_CONF"] = slurm.env["SLURM_CONF"]
        try:
            measure("slurm", _slurm_launcher)
        finally:
            slurm.stop()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False,
                                                                **agent_ports()})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=4, **agent_ports())
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, namespace="tfdist", log_to_driver=False)
            measure("ray", launch_ray)
        finally:
            ray.shutdown()
            cluster.shutdown()
    print(f"digits PS job, 1 chief + 2 workers + 1 ps, {args.epochs} epochs, one run each")
    print(f"{'backend':8s} {'submit->1st step s':>19s} {'steps/s':>9s} {'wall s':>8s}")
    for name, m in rows.items():
        print(f"{name:8s} {m['startup']:19.1f} {m['steps_per_sec']:9.0f} {m['wall']:8.1f}")
    for name, error in failed.items():
        print(f"{name:8s} failed: {error}")
    for name in [n for n in ("slurm", "ray") if n in rows and "local" in rows]:
        speed = rows[name]["steps_per_sec"] / rows["local"]["steps_per_sec"]
        startup = rows[name]["startup"] / rows["local"]["startup"]
        print(f"{name}/local steps/s: {speed:.2f}x (target >= 0.9x)   "
              f"submit to first step: {startup:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
