"""The Slurm backend on a real Slurm cluster: 3 slurmd nodes, each in its own network and UTS namespace.

One cluster (slurmctld + 3 slurmd, distinct addresses and hostnames) serves the
module. The job directories are on this machine's disk, which every namespace
shares, so the tests pass ``--shared-job-dir`` as a user on a cluster with
shared storage would. Needs root and Debian's slurm-wlm (``make slurm``).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _polling import processes_with, wait_until
from _slurm_cluster import SlurmCluster, unavailable_reason

from toolkit.cli import main
from toolkit.jobs import JobState, JobStore, api
from toolkit.launcher import LaunchSpec
from toolkit.launcher.slurm import SlurmOptions, launch_slurm

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("slurm")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "_scripts"
FIXTURES = ROOT / "tests" / "fixtures" / "jobs"


@pytest.fixture(scope="module")
def slurm3():
    reason = unavailable_reason(netns=True)
    if reason:
        print(f"skipping the Slurm cluster tests: {reason}")
        pytest.skip(reason)
    cluster = SlurmCluster(3, netns=True).start()
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    patch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        yield cluster
    finally:
        patch.undo()
        cluster.stop()


def test_ps_digits_job_lands_on_several_nodes_and_reaches_090(slurm3, home, tmp_path, capsys):
    """The README's digits job spec, unchanged, on Slurm: submit, list, stream-logs, describe."""
    out_dir = tmp_path / "digits-out"
    assert main(["jobs", "submit", "training", "slurm-digits", "--config", str(ROOT / "examples/jobs/digits_ps.yaml"),
                 "--package-path", str(ROOT / "examples/trainer"), "--job-dir", str(out_dir),
                 "--backend", "slurm", "--shared-job-dir", "--", "--epochs", "6", "--learning_rate", "0.005"]) == 0
    capsys.readouterr()
    assert main(["jobs", "stream-logs", "slurm-digits"]) == 0
    logs = capsys.readouterr()
    assert "Job [slurm-digits] ended SUCCEEDED." in logs.err, logs.out[-3000:]
    for prefix in ("[chief-0] ", "[worker-0] ", "[worker-1] ", "[ps-0] "):
        assert any(line.startswith(prefix) for line in logs.out.splitlines()), prefix
    accuracy = float(logs.out.split("final val_accuracy: ")[1].split()[0])
    assert accuracy > 0.9, logs.out[-2000:]
    assert list(out_dir.glob("ckpt-*.index"))

    record = api.describe("slurm-digits")
    assert record.state is JobState.SUCCEEDED and record.backend == "slurm"
    nodes = record.details["nodes"]
    assert set(nodes) == {"chief-0", "worker-0", "worker-1", "ps-0"}
    assert {n["node_id"] for n in nodes.values()} <= set(slurm3.names)
    assert len({n["node_id"] for n in nodes.values()}) >= 2  # n1-standard-4 tasks: 2 fit on an 8-CPU node
    assert {t.name: t.exit_code for t in record.tasks} == dict.fromkeys(nodes, 0)
    job_id = record.details["slurm"]["job_id"]
    info = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    assert "JobState=COMPLETED" in info
    # accounting without slurmdbd: Slurm's record of the job, kept past MinJobAge, and each task's own end
    [kept] = record.details["slurm"]["jobs"]
    assert (kept["job_id"], kept["state"], kept["exit_code"]) == (job_id, "COMPLETED", "0:0"), kept
    assert f"NodeList={kept['nodes']}" in info and kept["started"] <= kept["ended"]
    assert all((n["state"], n["exit_code"], n["failures"], n["preemptions"]) == ("SUCCEEDED", 0, 0, 0)
               and n["started_at"] <= n["ended_at"] for n in nodes.values()), nodes
    assert record.details["restarts"] == {"preemptions": 0, "failures": 0, "preemptedTasks": {}}
    assert not processes_with(f"TFDIST_JOB_DIR={record.job_dir}")
    assert main(["jobs", "describe", "slurm-digits"]) == 0
    assert "NODE" in capsys.readouterr().out


def test_worker_killed_mid_training_is_restarted_and_the_step_is_exact(slurm3, tmp_path):
    job_dir = tmp_path / "kill"
    spec = LaunchSpec(cmd=(sys.executable, str(SCRIPTS / "pss_train.py"), "--steps", "40", "--kill-worker",
                           "worker-1", "--kill-at-step", "15"), workers=2, ps=1, max_restarts=2, timeout=240,
                      settle_period=1.0)
    result = launch_slurm(spec, job_dir=job_dir, options=SlurmOptions(nodes=3, shared_dirs=True))
    assert result.ok, (result.message, (job_dir / "logs" / "chief-0.log").read_text()[-3000:])
    assert result.task("worker-1").restarts == 1 and result.task("worker-0").restarts == 0
    assert json.loads((job_dir / "tasks" / "chief-0" / "result.json").read_text())["steps"] == 40
    assert all(t.exit_code == 0 for t in result.tasks), [(t.name, t.exit_code) for t in result.tasks]
    assert not processes_with(f"TFDIST_JOB_DIR={job_dir}")


def test_mwms_job_and_cancel_leave_no_process(slurm3, home, tmp_path, capsys):
    """An MWMS job ends with identical weights on both workers; a cancelled job leaves nothing behind.

    The job to cancel is submitted first and starts while the MWMS job runs beside it on the cluster."""
    config = tmp_path / "sleepy.yaml"
    config.write_text(json.dumps({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "standard",
                                                    "workerType": "standard", "workerCount": 2,
                                                    "pythonModule": "trainer.tune_probe",
                                                    "args": ["--seconds", "300"]}}))
    assert main(["jobs", "submit", "training", "slurm-sleepy", "--config", str(config), "--package-path",
                 str(FIXTURES / "trainer"), "--job-dir", str(tmp_path / "sleepy-out"), "--backend", "slurm",
                 "--shared-job-dir"]) == 0

    job_dir = tmp_path / "mwms"
    assert main(["launch", "--backend", "slurm", "--nodes", "2", "--shared-dir", "--chief", "0", "--workers", "2",
                 "--job-dir", str(job_dir), "--timeout", "240", "--quiet", "--",
                 sys.executable, str(SCRIPTS / "mwms_train.py"), "--steps", "20"]) == 0
    weights = [np.load(job_dir / "tasks" / f"worker-{i}" / "weights.npz") for i in range(2)]
    assert all(np.array_equal(weights[0][k], weights[1][k]) for k in weights[0].files)

    wait_until(lambda: sum(t.state == "RUNNING" for t in api.describe("slurm-sleepy").tasks) == 3, timeout=60,
               what="the three tasks to run", every=0.1)
    record = api.describe("slurm-sleepy")
    assert len({n["node_id"] for n in record.details["nodes"].values()}) >= 2
    # Slurm's early signal to the tasks (what --signal=TERM@N sends before the time limit): the job is preempted,
    # not failed, and submitted again (a second sbatch) on the preemption budget
    first = record.details["slurm"]["job_id"]
    subprocess.run(["scancel", "--signal=TERM", first], check=True, timeout=30)

    def resubmitted() -> bool:
        again = api.describe("slurm-sleepy")
        return (len(again.details["slurm"].get("jobs", [])) == 2
                and sum(t.state == "RUNNING" for t in again.tasks) == 3)
    wait_until(resubmitted, timeout=90, what="the preempted job to run again", every=0.1)
    assert main(["jobs", "cancel", "slurm-sleepy"]) == 0
    record = api.describe("slurm-sleepy")
    assert record.state is JobState.CANCELLED
    preempted, last = record.details["slurm"]["jobs"]
    assert preempted["job_id"] == first != last["job_id"] == record.details["slurm"]["job_id"]
    assert preempted["state"] != "CANCELLED" and last["state"] == "CANCELLED", record.details["slurm"]
    assert record.details["restarts"]["preemptions"] == 1 and record.details["restarts"]["failures"] == 0
    capsys.readouterr()
    assert main(["jobs", "describe", "slurm-sleepy"]) == 0
    assert "restarts: 1 after preemptions, 0 after failures" in capsys.readouterr().out
    squeue = subprocess.run(["squeue", "-h", "-j", record.details["slurm"]["job_id"]], capture_output=True, text=True)
    assert squeue.stdout.strip() == ""
    wait_until(lambda: not processes_with(f"TFDIST_JOB_DIR={record.job_dir}"), timeout=20,
               what="every task process of the cancelled job to be gone", every=0.1)


def test_two_trial_tuning_job_runs_one_sbatch_per_trial(slurm3, home, tmp_path, capsys):
    config = tmp_path / "tune.yaml"
    doc = (FIXTURES / "tune_probe.yaml").read_text().replace("maxTrials: 4", "maxTrials: 2")
    config.write_text(doc)
    assert main(["jobs", "submit", "training", "slurm-tune", "--config", str(config), "--package-path",
                 str(FIXTURES / "trainer"), "--job-dir", str(tmp_path / "tune-out"), "--backend", "slurm",
                 "--shared-job-dir", "--stream-logs"]) == 0
    record = api.describe("slurm-tune")
    assert record.state is JobState.SUCCEEDED, record.error
    trials = [api.describe(name) for name in JobStore().children("slurm-tune")]
    assert len(trials) == 2 and all(t.state is JobState.SUCCEEDED for t in trials)
    job_ids = {t.details["slurm"]["job_id"] for t in trials}
    assert len(job_ids) == 2  # one Slurm job per trial
    assert record.details["trainingOutput"]["completedTrialCount"] == 2


def test_bad_input_is_refused_at_submit_and_leaves_no_job(slurm3, home, tmp_path, capsys):
    base = ["jobs", "submit", "training", "slurm-bad", "--module-name", "trainer.tune_probe", "--package-path",
            str(FIXTURES / "trainer"), "--job-dir", str(tmp_path / "out"), "--backend", "slurm"]
    assert main([*base, "--shared-job-dir", "--partition", "nope"]) == 1
    err = capsys.readouterr().err
    assert "partition" in err and "'nope'" in err and "Invalid partition name specified" in err, err
    assert main([*base, "--shared-job-dir", "--time-limit", "1h"]) == 1
    assert "time_limit" in capsys.readouterr().err.replace("--time-limit", "time_limit")
    assert main(base) == 1  # this machine's disk, for a job that may span nodes
    err = capsys.readouterr().err
    assert "on a local" in err and "may run on several nodes" in err and "shared" in err, err
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip() == ""
