"""The Slurm backend's parts that need no cluster: options, the resource table, shared storage, refusals."""
from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.jobs import JobSpec, JobSpecError
from toolkit.jobs.backends import get_backend
from toolkit.jobs.engines.slurm.backend import _job_resources, slurm_resources
from toolkit.launcher import LaunchError, LaunchSpec
from toolkit.launcher.slurm import SlurmOptions, check_shared, filesystem_of
from toolkit.launcher.slurm._launch import _layout, _refusal, _script


def test_options_validate_and_become_sbatch_flags():
    options = SlurmOptions(partition="gpu", time_limit="1:00:00", nodes=3, cpus_per_task=4, mem_per_cpu_mib=3840,
                           gpus_per_node=2, sbatch_args=("--requeue",))
    assert options.sbatch_flags(timeout=None) == ["--cpus-per-task=4", "--partition=gpu", "--time=1:00:00",
                                                  "--nodes=3", "--mem-per-cpu=3840", "--gres=gpu:2",
                                                  "--signal=TERM@30", "--requeue"]
    assert SlurmOptions().sbatch_flags(timeout=90) == ["--cpus-per-task=1", "--time=3",  # rounded up, plus a minute
                                                       "--signal=TERM@30", "--no-requeue"]
    assert SlurmOptions.from_dict(options.to_dict()) == options
    with pytest.raises(LaunchError, match=r"`partition` is 'a b'; expected a Slurm partition name") as err:
        SlurmOptions(partition="a b")
    assert err.value.field == "partition"
    with pytest.raises(LaunchError, match=r"`time_limit` is '1h'; expected Slurm's time syntax"):
        SlurmOptions(time_limit="1h")
    with pytest.raises(LaunchError, match=r"`nodes` is 0; expected an integer >= 1"):
        SlurmOptions(nodes=0)


def test_machine_types_map_to_slurm_resources_through_one_table():
    assert slurm_resources("n1-standard-4") == {"cpus_per_task": 4, "mem_per_cpu_mib": 3840, "gpus_per_node": 0}
    assert slurm_resources(None) == {"cpus_per_task": 1, "mem_per_cpu_mib": 0, "gpus_per_node": 0}
    assert slurm_resources("n1-standard-8", accelerator_count=2)["gpus_per_node"] == 2
    spec = JobSpec.from_dict({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "n1-standard-4",
                                                "workerType": "n1-standard-8", "workerCount": 2,
                                                "pythonModule": "t.task"}}, job_id="j")
    assert _job_resources(spec) == {"cpus_per_task": 8, "mem_per_cpu_mib": 3840, "gpus_per_node": 0}


def test_a_local_directory_is_refused_for_a_job_that_may_span_nodes(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\nserver:/export /shared nfs4 rw 0 0\n")
    assert filesystem_of("/shared/runs/a", str(mounts)) == "nfs4"
    assert filesystem_of("/home/me", str(mounts)) == "ext4"
    check_shared([str(tmp_path)], nodes=1, asserted=False)   # one node: anything goes
    check_shared([str(tmp_path)], nodes=None, asserted=True)  # the user says it is shared
    if filesystem_of(str(tmp_path)) in ("ext4", "xfs", "tmpfs", "overlay", "btrfs"):
        with pytest.raises(LaunchError, match=r"is on a local .* filesystem, but the Slurm job may run on several "
                                              r"nodes") as err:
            check_shared([str(tmp_path)], nodes=None, asserted=False)
        assert err.value.field == "job_dir"


def test_slurm_refusals_keep_slurm_words_and_name_the_field():
    options = SlurmOptions(partition="nope", time_limit="99")
    err = _refusal("sbatch: error: Batch job submission failed: Invalid partition name specified", options)
    assert err.field == "partition" and "('nope')" in str(err) and "Invalid partition name specified" in str(err)
    err = _refusal("sbatch: error: Batch job submission failed: Requested time limit is invalid", options)
    assert err.field == "time_limit"
    assert _refusal("sbatch: error: something else", options).field == "sbatch"


def test_the_batch_script_starts_one_srun_step_with_the_layout(tmp_path):
    spec = LaunchSpec(cmd=("python", "-m", "trainer.task", "--lr", "0.1 x"), workers=2, ps=1, dialect="cmle")
    layout, names = _layout(spec)
    assert layout == "ps=1,chief=1,evaluator=0" and names == ["master-0", "worker-0", "worker-1", "ps-0"]
    script = _script(spec, tmp_path, SlurmOptions(port=3000), layout)
    assert script.startswith("#!/bin/sh\n") and "\nexec srun --kill-on-bad-exit=0 --distribution=block " in script
    assert "--layout ps=1,chief=1,evaluator=0" in script and "--port 3000" in script
    assert script.rstrip().endswith(" -m trainer.task --lr '0.1 x'")  # quoted: no word splitting


def test_submit_refuses_when_sbatch_is_not_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    backend = get_backend("slurm", home=tmp_path / "home")
    spec = JobSpec.from_dict({"trainingInput": {"pythonModule": "t.task"}}, job_id="j")
    with pytest.raises(JobSpecError, match=r"sbatch and srun and squeue and scontrol and scancel are not on PATH"):
        backend.submit(spec)
    assert not (tmp_path / "home" / "jobs" / "j").exists()


def test_the_preemption_policy_becomes_sbatch_flags_and_the_tasks_grace():
    """Slurm signals the tasks (not the batch shell) the grace plus a margin before the limit, and never requeues:
    the launcher resubmits a preempted job itself, on the max_preemptions budget."""
    assert SlurmOptions(time_limit="30").preemption_flags() == ["--signal=TERM@30", "--no-requeue"]
    assert SlurmOptions(preemption_grace=55).preemption_flags() == ["--signal=TERM@60", "--no-requeue"]
    assert SlurmOptions(preemption_grace=0).preemption_flags() == ["--no-requeue"]
    own = SlurmOptions(sbatch_args=("--signal=USR1@90", "--requeue"))
    assert own.preemption_flags() == []
    assert own.sbatch_flags(timeout=None)[-2:] == ["--signal=USR1@90", "--requeue"]
    assert SlurmOptions.from_dict({"partition": None}).preemption_grace == 25  # a plan stored before the field
    for bad in (-1, 2.5, "30"):
        with pytest.raises(LaunchError, match=r"`preemption_grace` is .*; expected an integer >= 0") as err:
            SlurmOptions(preemption_grace=bad)  # type: ignore[arg-type]
        assert err.value.field == "preemption_grace"
    spec = LaunchSpec(cmd=("python", "train.py"), workers=1, ps=1)
    layout = _layout(spec)[0]
    first, later = (_script(spec, Path("/shared/j"), SlurmOptions(), layout, runs) for runs in (0, 2))
    assert "--runs-before 0 " in first and "--runs-before 2 " in later


def _run_wrapper(tmp_path: Path, script: str, *extra: str) -> dict:
    """Runs the srun task wrapper for real (as srun would, with Slurm's variables) as worker-0 of a PS job."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "localhost",
           "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "41",
           "SLURMD_NODENAME": "localhost"}
    job_dir = tmp_path / "job"
    out = subprocess.run([sys.executable, "-m", "toolkit.launcher.slurm._task", "--job-dir", str(job_dir),
                          "--layout", "ps=1,chief=1,evaluator=0", "--dialect", json.dumps({"name": "tf"}),
                          "--settle-period", "0.1", *extra, "--", sys.executable, "-c", script],
                         env=env, capture_output=True, text=True, timeout=60)
    assert (job_dir / "slurm" / "tasks" / "worker-0.json").exists(), out.stderr
    status = json.loads((job_dir / "slurm" / "tasks" / "worker-0.json").read_text())
    return {"code": out.returncode, "stderr": out.stderr, **status}


_EXITS = "import os, sys; sys.exit([{codes}][int(os.environ['TFDIST_RESTART_COUNT'])])"


def test_the_task_wrapper_restarts_a_preempted_worker_on_its_own_budget_and_reports_it(tmp_path):
    """A PS worker that exits 143 is restarted alone on max_preemptions (not max_restarts=0); its status file (the
    job's accounting, where Slurm keeps none per task) tells the preemption and the failure apart."""
    status = _run_wrapper(tmp_path, _EXITS.format(codes="143, 3, 0"), "--max-restarts", "1")
    assert status["code"] == 0, status["stderr"]
    assert (status["state"], status["exit_code"], status["preemptions"], status["failures"]) == ("SUCCEEDED", 0, 1, 1)
    assert status["restarts"] == 2 and status["slurm_job_id"] == "41" and status["node"] == "localhost"
    assert status["started_at"] <= status["ended_at"]
    assert "worker-0: was preempted with 143; restarting it (preemption 1 of 3)" in status["stderr"]
    assert "worker-0: exited with 3; restarting it (1 of 1)" in status["stderr"]


def test_the_task_wrapper_ends_preempted_past_its_budget(tmp_path):
    status = _run_wrapper(tmp_path, _EXITS.format(codes="143, 143"), "--max-preemptions", "1")
    assert status["code"] == 143
    assert (status["state"], status["exit_code"], status["preemptions"], status["failures"]) == ("PREEMPTED", 143, 1, 0)
    failed = _run_wrapper(tmp_path, _EXITS.format(codes="3"))
    assert (failed["state"], failed["exit_code"], failed["failures"]) == ("FAILED", 3, 0)


def test_tasks_slurm_killed_before_they_reported_are_named_with_slurms_record_of_the_job(tmp_path):
    """Without slurmdbd, a task killed with its job (time limit, node failure) has only scontrol's record to say why."""
    from toolkit.launcher.slurm._launch import _Watch, accounting

    watch = _Watch(tmp_path, ["chief-0", "ps-0"], None, None)
    watch.status = {"chief-0": {"node": "n1", "address": "n1:15000", "state": "SUCCEEDED", "exit_code": 0,
                                "preemptions": 0, "failures": 1},
                    "ps-0": {"node": "n2", "address": "n2:15000", "state": "RUNNING", "exit_code": None}}
    info = {"JobId": "7", "JobState": "TIMEOUT", "Reason": "TimeLimit", "ExitCode": "0:9", "NodeList": "n[1-2]",
            "StartTime": "2026-11-25T10:00:00", "EndTime": "2026-11-25T11:00:30", "Ignored": "x"}
    ended = watch.unreported(info)
    assert ended == {"ps-0": "killed with Slurm job 7, which ended TIMEOUT (TimeLimit)"}
    placement = watch.placement(ended)
    assert placement["ps-0"]["state"] == "KILLED" and placement["ps-0"]["reason"] == ended["ps-0"]
    assert placement["chief-0"]["state"] == "SUCCEEDED" and "reason" not in placement["chief-0"]
    assert watch.restarts("failures") == 1 and watch.restarts("preemptions") == 0
    assert accounting("7", info) == {"job_id": "7", "state": "TIMEOUT", "exit_code": "0:9", "reason": "TimeLimit",
                                     "started": "2026-11-25T10:00:00", "ended": "2026-11-25T11:00:30",
                                     "nodes": "n[1-2]"}


def test_preload_is_refused_on_slurm_where_each_task_starts_its_own_interpreter(tmp_path, capsys):
    import sys

    from toolkit.cli import main
    from toolkit.launcher.slurm import launch_slurm

    script = tmp_path / "train.py"
    script.write_text("pass\n")
    spec = LaunchSpec(cmd=(sys.executable, str(script)), workers=1, preload=("json",))
    with pytest.raises(LaunchError, match=r"`preload` is \('json',\), but on Slurm every task starts its own "
                                          r"interpreter") as err:
        launch_slurm(spec, job_dir=tmp_path / "job")
    assert err.value.field == "preload" and not (tmp_path / "job").exists()
    assert main(["launch", "--backend", "slurm", "--preload", "--workers", "1", "--job-dir", str(tmp_path / "j"),
                 "--", sys.executable, str(script)]) == 2
    assert "--preload" in capsys.readouterr().err
