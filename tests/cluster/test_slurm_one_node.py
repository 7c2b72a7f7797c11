"""A 1-node Slurm cluster: several tasks of one job on one node, and `tfdist run` under a bare srun."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _slurm_cluster import SlurmCluster, unavailable_reason

from toolkit.cli import main

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("slurm-one")]

_SHOW = "import json, os; print(json.dumps(json.loads(os.environ['TF_CONFIG'])))"


@pytest.fixture(scope="module")
def slurm1():
    reason = unavailable_reason(netns=False)
    if reason:
        print(f"skipping the Slurm cluster tests: {reason}")
        pytest.skip(reason)
    cluster = SlurmCluster(1).start()
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    try:
        yield cluster
    finally:
        patch.undo()
        cluster.stop()


def test_launch_and_run_on_one_node(slurm1, tmp_path, capsys):
    job_dir = tmp_path / "job"
    assert main(["launch", "--backend", "slurm", "--nodes", "1", "--workers", "2", "--ps", "1", "--job-dir",
                 str(job_dir), "--timeout", "60", "--", sys.executable, "-c", _SHOW]) == 0
    out = capsys.readouterr().out.splitlines()
    configs = {line.split("] ", 1)[0][1:]: json.loads(line.split("] ", 1)[1]) for line in out if line.startswith("[")}
    assert set(configs) == {"chief-0", "worker-0", "worker-1", "ps-0"}
    cluster = configs["chief-0"]["cluster"]
    addresses = [a for job in ("chief", "worker", "ps") for a in cluster[job]]
    assert len(set(addresses)) == 4 and {a.rsplit(":", 1)[0] for a in addresses} == set(slurm1.names)
    assert all(c["cluster"] == cluster for c in configs.values())

    env = {**os.environ, "SLURM_CONF": slurm1.env["SLURM_CONF"]}
    srun = subprocess.run(["srun", "-N1", "-n2", sys.executable, "-m", "toolkit", "run", "--", sys.executable, "-c",
                           _SHOW], capture_output=True, text=True, timeout=60, env=env)
    assert srun.returncode == 0, srun.stderr
    tasks = sorted((d["task"]["type"], d["task"]["index"]) for d in map(json.loads, srun.stdout.splitlines()))
    assert tasks == [("worker", 0), ("worker", 1)]
