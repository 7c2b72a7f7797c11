"""The Ray backend's pure parts: options, the machine-type table, the shared-directory rule, the CLI
wiring, and that nothing but the Ray backend imports Ray."""
from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit.cli import main
from toolkit.jobs import JobSpec, JobStore
from toolkit.jobs.engines.ray.backend import RayBackend, ray_resources
from toolkit.jobs.errors import JobSpecError
from toolkit.jobs.storage.records import JobRecord, TaskRecord
from toolkit.jobs.views import format_record
from toolkit.launcher import LaunchError
from toolkit.launcher.ray import RayOptions, check_shared_paths, is_shared_uri

GIB = 1024 ** 3


def test_nothing_but_the_ray_backend_imports_ray():
    code = ("import sys, toolkit, toolkit.launcher, toolkit.jobs, toolkit.cli, toolkit.launcher.ray, "
            "toolkit.jobs.engines.ray.backend; from toolkit.jobs import api; api.get_backend('ray'); "
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_options_validate_and_read_ray_address_once():
    assert RayOptions.from_env({"RAY_ADDRESS": "head:6379"}).address == "head:6379"
    assert RayOptions.from_env({"RAY_ADDRESS": "head:6379"}, address="ray://other:10001").address == "ray://other:10001"
    assert RayOptions.from_env({}).address is None
    with pytest.raises(LaunchError, match=r"`placement` is 'EVERYWHERE'; expected one of auto, STRICT_SPREAD") as err:
        RayOptions(placement="EVERYWHERE")
    assert err.value.field == "placement"
    with pytest.raises(LaunchError, match=r"`resources\['worker'\]\['CPU'\]` is -1; expected a number >= 0"):
        RayOptions(resources={"worker": {"CPU": -1}})
    with pytest.raises(LaunchError, match=r"`resources\['master'\]`"):
        RayOptions(resources={"master": {"CPU": 1}})
    options = RayOptions(resources={"worker": {"CPU": 4, "GPU": 0}})
    assert options.task_resources("worker") == {"CPU": 4.0} and options.task_resources("ps") == {"CPU": 1.0}
    assert RayOptions.from_dict(options.to_dict()) == options


def test_machine_types_map_to_ray_resources_through_one_table():
    assert ray_resources("n1-standard-4") == {"CPU": 4.0, "memory": 15 * GIB}
    assert ray_resources("standard_gpu") == {"CPU": 8.0, "memory": 30 * GIB, "GPU": 1.0}
    assert ray_resources("n1-standard-8", accelerator_count=2)["GPU"] == 2.0
    assert ray_resources(None) == {"CPU": 1.0}


def test_a_local_path_is_refused_when_tasks_run_on_other_hosts():
    check_shared_paths(["/data/run"], ["10.0.0.1", "10.0.0.1"], here="10.0.0.1", asserted=False)  # all here
    check_shared_paths(["gs://bucket/run"], ["10.0.0.1", "10.0.0.2"], here="10.0.0.1", asserted=False)
    check_shared_paths(["/nfs/run"], ["10.0.0.2"], here="10.0.0.1", asserted=True)  # the user says it is shared
    with pytest.raises(LaunchError, match=r"`job_dir` is the local path '/data/run', but tasks were placed on "
                                          r"other hosts \(10.0.0.2; this one is 10.0.0.1\)") as err:
        check_shared_paths(["/data/run"], ["10.0.0.1", "10.0.0.2"], here="10.0.0.1", asserted=False)
    assert "gs://, s3://, hdfs://" in str(err.value) and "shared_dirs=True" in str(err.value)
    assert is_shared_uri("s3://b/k") and is_shared_uri("HDFS://nn/x") and not is_shared_uri("runs/x")


def test_submit_records_the_ray_plan_with_resources_and_address(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    spec = JobSpec.from_dict({"trainingInput": {
        "scaleTier": "CUSTOM", "masterType": "n1-standard-4", "workerType": "n1-highcpu-8", "workerCount": 2,
        "parameterServerType": "n1-standard-2", "parameterServerCount": 1, "pythonModule": "trainer.task",
        "packageUris": ["trainer"]}}, job_id="j")
    backend = RayBackend(JobStore(tmp_path / "home"), placement="SPREAD")
    details = backend.extend_details(spec, {"plan": {"module": "trainer.task"}, "tasks": []})
    engine = details["plan"]["engine"]
    assert engine["name"] == "ray"
    assert engine["options"]["address"] == "head:6379" and engine["options"]["placement"] == "SPREAD"
    assert engine["options"]["resources"]["worker"] == {"CPU": 8.0, "memory": float(int(8 * 0.9 * 1024) * 2 ** 20)}
    assert engine["options"]["resources"]["chief"]["CPU"] == 4.0
    assert engine["options"]["resources"]["ps"]["CPU"] == 2.0
    with pytest.raises(JobSpecError, match="--placement"):
        RayBackend(JobStore(tmp_path / "home"), placement="nowhere").extend_details(spec, details)


def test_cli_flags_reach_the_right_backend(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    assert main(["jobs", "submit", "training", "j1", "--module-name", "m", "--backend", "ray",
                 "--namespace", "ns"]) == 1
    assert "--namespace: does not apply to the ray backend" in capsys.readouterr().err
    assert main(["jobs", "submit", "training", "j2", "--module-name", "m", "--ray-address", "h:1"]) == 1
    assert "--ray-address: applies to the ray backend only" in capsys.readouterr().err
    assert main(["launch", "--backend", "ray", "--placement", "ANYWHERE", "--", "python", "-c", "0"]) == 2
    assert "`--placement` is 'ANYWHERE'" in capsys.readouterr().err


def test_describe_shows_each_ray_task_node():
    record = JobRecord(name="j", backend="ray", state="RUNNING", spec={}, created_at=0.0,
                       tasks=(TaskRecord(name="worker-0", state="RUNNING", restarts=1),),
                       details={"nodes": {"worker-0": {"node_id": "abcdef0123456789", "address": "10.0.0.2:4000"}}})
    text = format_record(record)
    assert "NODE" in text and "abcdef012345" in text and "10.0.0.2:4000" in text


def test_describe_tells_why_a_slurm_task_was_killed_with_its_job():
    why = "killed with Slurm job 7, which ended TIMEOUT (TimeLimit)"
    record = JobRecord(name="j", backend="slurm", state="FAILED", spec={}, created_at=0.0,
                       tasks=(TaskRecord(name="ps-0", state="FAILED"), TaskRecord(name="chief-0", state="SUCCEEDED")),
                       details={"nodes": {"ps-0": {"node_id": "node1", "state": "KILLED", "reason": why},
                                          "chief-0": {"node_id": "node2", "state": "SUCCEEDED"}}})
    text = format_record(record)
    assert f"  ps-0: {why}" in text and "chief-0: " not in text


def test_an_actor_lost_with_a_node_drained_for_preemption_is_a_preemption_not_a_failure():
    """Ray's own death record (the error Ray raises for the actor) decides: a node drained for preemption makes the
    task preempted (143, restarted on max_preemptions); any other death is a failure (-9, on max_restarts)."""
    ray = pytest.importorskip("ray")
    from ray.core.generated.common_pb2 import ActorDiedErrorContext, NodeDeathInfo

    from toolkit.launcher import Decision, FailurePolicy, TaskExit
    from toolkit.launcher._result import is_preemption
    from toolkit.launcher.ray._task import ACTOR_LOST, death_of

    def died(reason: int) -> Exception:
        context = ActorDiedErrorContext(error_message="the node died", actor_id=b"\x01" * 16,
                                        node_death_info=NodeDeathInfo(reason=reason))
        return ray.exceptions.ActorDiedError(context)

    code, note = death_of("worker-1", died(NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED))
    assert code == 143 and is_preemption(code) and "drained for preemption" in note
    policy = FailurePolicy(max_restarts=0, parameter_server=True)
    assert policy.decide(TaskExit(task_type="worker", is_chief=False, exit_code=code,
                                  seconds_since_exit=30.0)) is Decision.RESTART_TASK
    for other in (died(NodeDeathInfo.UNEXPECTED_TERMINATION), died(NodeDeathInfo.AUTOSCALER_DRAIN_IDLE),
                  ray.exceptions.ActorDiedError()):
        code, note = death_of("worker-1", other)
        assert code == ACTOR_LOST and not is_preemption(code) and "its Ray actor died (ActorDiedError)" in note
    assert policy.decide(TaskExit(task_type="worker", is_chief=False, exit_code=ACTOR_LOST,
                                  seconds_since_exit=30.0)) is Decision.FAIL_JOB


_HOLD = r'''
import os, signal, sys, threading, time
from toolkit.launcher.ray._actor import TaskRunner

def ray_handler(signum, frame):  # stands for Ray's worker handler, which ends the actor's process
    print("ray's handler", flush=True)
    os._exit(7)

signal.signal(signal.SIGTERM, ray_handler)
runner = TaskRunner("worker-1")
task = ("import signal, sys, time\n"
        "def checkpoint(*a):\n    time.sleep(0.5)\n    print('checkpointed', flush=True)\n    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, checkpoint)\nprint('up', flush=True)\ntime.sleep(60)\n")
pid, cursor = runner.start([sys.executable, "-c", task], {"TFDIST_PREEMPTION_GRACE": "5"}, sys.executable)

def driver():
    global cursor
    while True:
        lines, cursor, code = runner.read(cursor, 1.0)
        for line in lines:
            print("task:", line, flush=True)
            if line == "up":
                threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()  # the machine goes away
        if code is not None:
            print("driver read", code, flush=True)
            return

threading.Thread(target=driver, daemon=True).start()
time.sleep(30)
'''


def test_a_ray_actor_signalled_with_its_machine_lets_its_task_checkpoint_and_report_143_first(tmp_path):
    """SIGTERM to the actor's process (a machine taken away signals all its processes): the actor passes it on,
    the task checkpoints and exits 143, the driver reads 143 (a preemption), and only then Ray's handler runs.
    Without the hold, Ray's handler would end the actor at once and the task would die with it."""
    pytest.importorskip("ray")
    out = subprocess.run([sys.executable, "-c", _HOLD], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert out.returncode == 7, (out.stdout, out.stderr[-2000:])
    assert lines == ["task: up", "task: checkpointed", "driver read 143", "ray's handler"], out.stdout


def test_a_bad_preemption_grace_stops_a_ray_launch_before_it_connects(tmp_path):
    """As the local launcher: the tasks' grace is read through ServeOptions before anything is created."""
    from strategies import StrategyError
    from toolkit.launcher.ray import launch_ray

    with pytest.raises(StrategyError) as info:
        launch_ray(["python", "-c", "pass"], job_dir=tmp_path / "job", env={"TFDIST_PREEMPTION_GRACE": "0"},
                   address="127.0.0.1:1")
    assert info.value.field == "preemption_grace" and "TFDIST_PREEMPTION_GRACE) is '0'" in str(info.value)
    assert not (tmp_path / "job").exists()
