"""The Slurm backend's parts that need no cluster: options, the resource table, shared storage, refusals."""
from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.jobs import JobSpec, JobSpecError
from toolkit.jobs.backends import get_backend
from toolkit.jobs.slurm_backend import _job_resources, slurm_resources
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
