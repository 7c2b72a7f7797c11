"""A 1-node Slurm cluster: several tasks of one job on one node, and `tfdist run` under a bare srun."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from _slurm_cluster import SlurmCluster, unavailable_reason

from toolkit.cli import main
from toolkit.jobs.engines.local._run_parts import restart_counts

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("slurm-one")]

_SCRIPTS = Path(__file__).resolve().parent / "_scripts"
_SCRIPT = _SCRIPTS / "preempt_fit.py"
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

    # The tasks die without a word (SIGKILL to each srun task, as the kernel's OOM killer would send): the launch
    # says each was killed with the job, from scontrol's record of it (accounting without slurmdbd), and that they
    # FAILED (this launcher did not stop them).
    from _polling import wait_until

    from toolkit.launcher import LaunchSpec
    from toolkit.launcher.slurm import SlurmOptions, launch_slurm

    killed_dir, jobs, placement = tmp_path / "killed", [], {}
    spec = LaunchSpec(cmd=(sys.executable, "-c", "import time; time.sleep(120)"), chief=0, workers=2, timeout=90)

    def kill(job_id: str) -> None:
        def run() -> None:
            statuses = killed_dir / "slurm" / "tasks"
            wait_until(lambda: len(list(statuses.glob("*.json"))) == 2, timeout=60, what="both tasks to report",
                       every=0.05)
            for status in statuses.glob("*.json"):
                child = json.loads(status.read_text())["pid"]
                wrapper = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])
                os.kill(wrapper, signal.SIGKILL)
        threading.Thread(target=run, daemon=True).start()

    result = launch_slurm(spec, job_dir=killed_dir, options=SlurmOptions(nodes=1), on_submit=kill,
                          on_job=lambda progress: jobs.append(progress["jobs"]), on_placement=placement.update)
    assert not result.ok and result.exit_code == 1 and "never reported an exit code" in result.message
    assert [(t.state, t.exit_code) for t in result.tasks] == [("FAILED", None)] * 2  # not STOPPED: we did not
    final = jobs[-1][0]
    assert final["state"] in ("FAILED", "CANCELLED") and final["nodes"] == slurm1.names[0], final
    for name in ("worker-0", "worker-1"):
        assert placement[name]["state"] == "KILLED", placement
        assert placement[name]["reason"].startswith(f"killed with Slurm job {final['job_id']}, which ended "
                                                    f"{final['state']}"), placement


def test_a_signalled_job_checkpoints_exits_143_and_is_submitted_again_on_the_preemption_budget(slurm1, tmp_path,
                                                                                                 monkeypatch):
    """Slurm's signal (scancel --signal=TERM, as --signal=TERM@N sends it before the time limit) reaches the task as
    a preemption: it checkpoints at the step reached and exits 143; the launcher submits the job again (a
    preemption, not a failure: max_restarts=0), which restores that step and trains to the exact end."""
    from _polling import wait_until

    from toolkit.launcher import LaunchSpec
    from toolkit.launcher.slurm import SlurmOptions, launch_slurm

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    model_dir, job_dir, job_ids = tmp_path / "model", tmp_path / "job", []
    spec = LaunchSpec(cmd=(sys.executable, str(_SCRIPT), "--model-dir", str(model_dir), "--epochs", "16"), chief=0,
                      workers=1, max_restarts=0, restartable=True, max_preemptions=1, timeout=240)

    def preempt() -> None:
        wait_until(lambda: any(model_dir.glob("ckpt-*.index")), timeout=120, what="the first checkpoint",
                   every=0.05)
        subprocess.run(["scancel", "--signal=TERM", job_ids[0]], check=True, timeout=30)

    signaller = threading.Thread(target=preempt, daemon=True)
    jobs: list = []
    result = launch_slurm(spec, job_dir=job_dir, options=SlurmOptions(nodes=1),
                          on_submit=lambda job_id: (job_ids.append(job_id), len(job_ids) == 1 and signaller.start()),
                          on_job=lambda progress: jobs.append(progress["jobs"]))
    log = (job_dir / "logs" / "worker-0.log").read_text()
    assert result.ok, (result.message, log[-3000:])
    assert (result.preemptions, result.failures, result.cluster_restarts) == (1, 0, 1), result
    assert len(set(job_ids)) == 2  # a second sbatch, not a task restart inside the first
    # both Slurm jobs as scontrol recorded them at their ends: the preempted one, then the one that finished
    assert [j["job_id"] for j in jobs[-1]] == job_ids and jobs[-1][1]["state"] == "COMPLETED", jobs[-1]
    assert jobs[-1][0]["state"] in ("COMPLETED", "FAILED") and jobs[-1][0]["ended"], jobs[-1]
    at = [int(s) for s in re.findall(r"preempted \([^)]*\): (?:checkpoint at )?step (\d+) (?:written|is checkp)", log)]
    notes = [line for line in log.splitlines() if "preempt" in line or "restored" in line]
    assert len(at) == 1 and 50 <= at[0] < 800, notes
    assert f"at global step {at[0]}" in log, notes  # the second job restored the preempted step
    assert json.loads((tmp_path / "result.json").read_text()) == {"global_step": 800}
    assert restart_counts(result) == {"preemptions": 1, "failures": 0, "preemptedTasks": {"worker-0": 1}}


def test_a_slurm_task_gets_a_private_random_signal_dir_and_a_port_another_user_takes_fails_the_job(slurm1, tmp_path,
                                                                                                  capsys):
    import pwd

    if os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root (a second user's listener is started as nobody) and /usr/bin/python3")
    nobody = pwd.getpwnam("nobody")
    job_dir = tmp_path / "job"
    code = main(["launch", "--backend", "slurm", "--nodes", "1", "--workers", "1", "--job-dir", str(job_dir),
                 "--timeout", "60", "--", sys.executable, str(_SCRIPTS / "signals_and_port_squatter.py"),
                 str(nobody.pw_uid), str(nobody.pw_gid)])
    captured = capsys.readouterr()
    assert code == 1, captured.err[-3000:]
    log = (job_dir / "logs" / "worker-0.log").read_text()
    found = re.search(r"signal-dir (/tmp/tfdist-signals-[0-9a-f]{32}) 0o700", log)
    assert found, log  # not the guessable <tmp>/tfdist-<uid>: a random name, made private by the task
    assert not os.path.exists(found.group(1))  # removed once the task ended
    assert re.search(rf"port \d+ of worker-0 is listened on by uid {nobody.pw_uid}, another user", log), log
    assert "is listened on by uid" in captured.out + captured.err
