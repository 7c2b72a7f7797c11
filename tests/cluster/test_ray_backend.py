"""The Ray backend on a real multi-node Ray cluster: a head and 2 more nodes on this machine.

One ``ray.cluster_utils.Cluster`` serves every test of this module (its start-up
is paid once). Every Ray process inherits ``RAY_TMPDIR`` (a directory of this
test run), so after the cluster's own shutdown the fixture can assert that no
raylet, GCS, worker or task process of it is left. Ray is never stopped with
``ray stop``, which would end every Ray cluster on the machine.
"""
from __future__ import annotations

import io
import json
import shutil
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from _polling import processes_with, wait_until

from toolkit.cli import main
from toolkit.jobs import JobState, JobStore, api
from toolkit.jobs.engines.local._procs import is_alive

ray = pytest.importorskip("ray")
# one Ray cluster for the module: its tests stay on one pytest worker
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("ray")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "_scripts"
FIXTURES = ROOT / "tests" / "fixtures" / "jobs"
GIB = 1024 ** 3


@pytest.fixture(scope="module")
def ray_cluster():
    from ray.cluster_utils import Cluster

    from toolkit.launcher.ray._cluster import agent_ports

    # a short root: Ray's sockets live below it and AF_UNIX paths stop at 107 bytes, which pytest's
    # per-worker temporary directories overrun
    root = Path(tempfile.mkdtemp(prefix="tfdist-ray-"))
    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_TMPDIR", str(root))          # Ray's sessions, sockets and address file stay in here
    patch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    patch.delenv("RAY_ADDRESS", raising=False)
    node = {"num_cpus": 8, "memory": 64 * GIB}   # logical: room for 2 n1-standard-4 tasks per node
    cluster = None
    try:
        # two cores shared with other TF processes can starve a raylet of CPU for seconds: give the GCS's
        # health check a minute before it declares a node dead (Ray's default gives up after 5 x 3 s)
        patience = {"health_check_failure_threshold": 20}
        cluster = Cluster(initialize_head=True, head_node_args={**node, **agent_ports(), "include_dashboard": False,
                                                                "_system_config": patience})
        for _ in range(2):
            cluster.add_node(**node, **agent_ports())
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="tfdist", log_to_driver=False)
        yield SimpleNamespace(address=cluster.address, node_ids={n["NodeID"] for n in ray.nodes()})
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        patch.undo()
        marker = f"RAY_TMPDIR={root}"
        try:
            wait_until(lambda: not processes_with(marker), timeout=60, what="every Ray process to exit")
        except AssertionError:
            raise AssertionError(f"Ray processes left behind: {processes_with(marker)}") from None
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _no_actor(name: str) -> bool:
    try:
        ray.get_actor(name, namespace="tfdist")
    except ValueError:
        return True
    return False


def test_ps_digits_job_spreads_over_nodes_and_reaches_090(ray_cluster, home, tmp_path, capsys):
    """The README's digits job spec, unchanged, on Ray: submit, list, stream-logs, describe."""
    out_dir = tmp_path / "digits-out"
    assert main(["jobs", "submit", "training", "ray-digits", "--config", str(ROOT / "examples/jobs/digits_ps.yaml"),
                 "--package-path", str(ROOT / "examples/trainer"), "--job-dir", str(out_dir),
                 "--backend", "ray", "--ray-address", ray_cluster.address,
                 "--", "--epochs", "8", "--learning_rate", "0.01"]) == 0
    capsys.readouterr()
    assert main(["jobs", "list"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["ray-digits", "ray"]

    assert main(["jobs", "stream-logs", "ray-digits"]) == 0
    logs = capsys.readouterr()
    assert "Job [ray-digits] ended SUCCEEDED." in logs.err, logs.out[-3000:]
    for prefix in ("[chief-0] ", "[worker-0] ", "[worker-1] ", "[ps-0] "):
        assert any(line.startswith(prefix) for line in logs.out.splitlines()), prefix
    accuracy = float(logs.out.split("final val_accuracy: ")[1].split()[0])
    assert accuracy > 0.9, logs.out[-2000:]
    assert list(out_dir.glob("ckpt-*.index"))

    record = api.describe("ray-digits")
    assert record.state is JobState.SUCCEEDED and record.backend == "ray"
    nodes = record.details["nodes"]
    assert set(nodes) == {"chief-0", "worker-0", "worker-1", "ps-0"}
    assert {n["node_id"] for n in nodes.values()} <= ray_cluster.node_ids
    assert len({n["node_id"] for n in nodes.values()}) >= 2  # spread over the Ray nodes
    assert {t.name: t.exit_code for t in record.tasks} == dict.fromkeys(nodes, 0)
    assert all(_no_actor(n["actor"]) for n in nodes.values())
    assert main(["jobs", "describe", "ray-digits"]) == 0
    described = capsys.readouterr().out
    assert "NODE" in described and nodes["worker-1"]["node_id"][:12] in described


def test_worker_actor_killed_mid_training_is_restarted_and_the_step_is_exact(ray_cluster, tmp_path):
    """Ray restarts the killed worker's actor; the task comes back on its port and the chief finishes."""
    from toolkit.launcher.ray import launch_ray

    job_dir = tmp_path / "kill"
    placement: dict = {}
    output = io.StringIO()
    result: dict = {}

    def run() -> None:
        result["r"] = launch_ray(["python", str(SCRIPTS / "pss_train.py"), "--steps", "60", "--kill-at-step", "20",
                                  "--await-kill", "worker-1"], workers=2, ps=1, job_dir=job_dir, max_restarts=2,
                                 settle_period=1.0, timeout=240, stream=output, on_placement=placement.update,
                                 address=ray_cluster.address)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: (job_dir / "paused").exists() or not thread.is_alive(), timeout=180, what="the pause")
        assert thread.is_alive(), output.getvalue()[-3000:]
        victim = placement["worker-1"]
        ray.kill(ray.get_actor(victim["actor"], namespace="tfdist"), no_restart=False)
    finally:
        thread.join(240)
    launch = result["r"]
    assert launch.ok, (launch.message, output.getvalue()[-3000:])
    assert launch.task("worker-1").restarts == 1 and launch.task("worker-0").restarts == 0
    assert (launch.failures, launch.preemptions) == (1, 0)  # a killed actor is a failure; a drained node would not be
    assert placement["worker-1"]["actor_restarts"] == 1 and placement["worker-1"]["address"] == victim["address"]
    # The kill came while no step was in flight, so no closure was retried: exactly the steps scheduled.
    assert json.loads((job_dir / "tasks" / "chief-0" / "result.json").read_text())["steps"] == 60
    log = (job_dir / "logs" / "worker-1.log").read_text()
    assert "its Ray actor died" in log and "worker-1 restarted (start #2)" in log
    assert all(_no_actor(info["actor"]) for info in placement.values())
    assert not processes_with(f"TFDIST_JOB_DIR={job_dir}")


def test_mwms_launch_from_the_cli_restarts_the_cluster_from_its_checkpoint(ray_cluster, tmp_path, capsys):
    """A multi-worker-mirrored task dies: with --restartable the whole cluster restarts and resumes."""
    job_dir = tmp_path / "mwms"
    code = main(["launch", "--backend", "ray", "--ray-address", ray_cluster.address, "--workers", "2",
                 "--job-dir", str(job_dir), "--timeout", "300", "--restartable", "--max-restarts", "1", "--",
                 "python", str(SCRIPTS / "mwms_train.py"), "--steps", "30", "--checkpoint-every", "5",
                 "--die-task", "worker-1", "--die-at-step", "12"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert any(line.startswith("[worker-1] ") for line in captured.out.splitlines())
    assert "worker-0=0 (restarted 1x), worker-1=0 (restarted 1x)" in captured.err
    import numpy as np
    for task in ("worker-0", "worker-1"):
        done = json.loads((job_dir / "tasks" / task / "result.json").read_text())
        assert (done["steps"], done["resumed_from"]) == (30, 10)  # from the last checkpoint before the death
    weights = [np.load(job_dir / "tasks" / f"worker-{i}" / "weights.npz") for i in (0, 1)]
    assert all(np.array_equal(weights[0][k], weights[1][k]) for k in weights[0].files)
    placement = json.loads((job_dir / "placement.json").read_text())
    assert placement["worker-0"]["strategy"] == "STRICT_SPREAD"  # 2 tasks, 3 nodes: one task per node
    assert placement["worker-0"]["node_id"] != placement["worker-1"]["node_id"]
    assert not processes_with(f"TFDIST_JOB_DIR={job_dir}")


def test_cancel_leaves_no_actor_and_no_process(ray_cluster, home, tmp_path, capsys):
    """A 4-task job (TensorFlow-free tasks that would run for 10 minutes) cancelled mid-run."""
    config = tmp_path / "job.yaml"
    config.write_text("trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standard-2\n  workerType: n1-standard-2\n"
                      "  workerCount: 2\n  parameterServerType: n1-standard-2\n  parameterServerCount: 1\n")
    assert main(["jobs", "submit", "training", "ray-long", "--config", str(config), "--module-name", "trainer.probe",
                 "--package-path", str(FIXTURES / "trainer"), "--job-dir", str(tmp_path / "out"),
                 "--backend", "ray", "--ray-address", ray_cluster.address, "--", "--seconds", "600"]) == 0
    logs = home / "jobs" / "ray-long" / "logs"
    wait_until(lambda: all((logs / f"{t}.log").exists() and " started" in (logs / f"{t}.log").read_text()
                      for t in ("master-0", "worker-0", "worker-1", "ps-0")), timeout=120, what="every task")
    record = api.describe("ray-long")
    assert record.state is JobState.RUNNING and len(record.tasks) == 4
    nodes = record.details["nodes"]
    assert sorted(nodes) == ["master-0", "ps-0", "worker-0", "worker-1"]  # CMLE's names, from the launcher itself
    assert not any(_no_actor(n["actor"]) for n in nodes.values())  # they are there while it runs
    job_dir = str(JobStore(home).job_dir("ray-long"))
    assert len(processes_with(f"TFDIST_JOB_DIR={job_dir}")) == 4
    capsys.readouterr()
    assert main(["jobs", "cancel", "ray-long"]) == 0
    assert capsys.readouterr().out.strip() == "Job [ray-long] is CANCELLED."
    assert [h.state.value for h in api.describe("ray-long").history][-2:] == ["CANCELLING", "CANCELLED"]
    assert all(_no_actor(n["actor"]) for n in nodes.values())
    wait_until(lambda: not processes_with(f"TFDIST_JOB_DIR={job_dir}"), timeout=30, what="the tasks to exit")
    supervisor = JobStore(home).supervisor("ray-long")
    wait_until(lambda: not is_alive(supervisor.pid, supervisor.start_ticks), timeout=30, what="the supervisor to exit")
    assert main(["jobs", "stream-logs", "ray-long", "--task", "worker-1"]) == 4
    assert "[worker-1] probe worker-1 started" in capsys.readouterr().out


def test_tuning_runs_four_trials_two_at_a_time_on_ray(ray_cluster, home, tmp_path):
    """The study's trials are Ray jobs (TensorFlow-free probe trainer, so the test costs seconds)."""
    study = tmp_path / "study"
    assert main(["jobs", "submit", "training", "ray-hp", "--config", str(FIXTURES / "tune_probe.yaml"),
                 "--package-path", str(FIXTURES / "trainer"), "--job-dir", str(study),
                 "--backend", "ray", "--ray-address", ray_cluster.address, "--", "--seconds", "2"]) == 0
    record = wait_until(lambda: (r := api.describe("ray-hp")).is_final and r, timeout=300, what="the study")
    assert record.state is JobState.SUCCEEDED, record.error
    assert record.details["trainingOutput"]["completedTrialCount"] == 4
    store = JobStore(home)
    trials = [store.get(name) for name in store.children("ray-hp")]
    assert [t.name for t in trials] == [f"ray-hp-trial-{n}" for n in range(1, 5)]
    assert all(t.state is JobState.SUCCEEDED and t.backend == "ray" for t in trials)
    for trial in trials:
        node = trial.details["nodes"]["master-0"]
        assert node["node_id"] in ray_cluster.node_ids
        seen = json.loads((study / trial.details["trial"]["trialId"] / "trial.json").read_text())["tf_config"]
        assert seen["cluster"]["master"] == [node["address"]]  # the address Ray reported for its node
        assert seen["task"] == {"type": "master", "index": 0, "trial": trial.details["trial"]["trialId"]}
    overlapping = [(a.name, b.name) for i, a in enumerate(trials) for b in trials[i + 1:]
                   if a.started_at < b.ended_at and b.started_at < a.ended_at]
    assert overlapping
    assert max(sum(t.started_at <= s.started_at < t.ended_at for t in trials) for s in trials) == 2


def test_early_stopping_stops_a_hopeless_trial_on_ray(ray_cluster, home, tmp_path):
    """Trial early stopping sits on the backend protocol: the same study stops the same trial on Ray."""
    doc = yaml.safe_load((FIXTURES / "tune_probe.yaml").read_text())
    doc["trainingInput"]["pythonModule"] = "trainer.curve_probe"
    doc["trainingInput"]["hyperparameters"].update(
        maxTrials=3, enableTrialEarlyStopping=True, earlyStopping={"minMeasurements": 2},
        params=[{"parameterName": "x", "type": "DOUBLE", "minValue": 0.5, "maxValue": 1.0}])
    config = tmp_path / "stop.yaml"
    config.write_text(yaml.safe_dump(doc))
    study = tmp_path / "study"
    assert main(["jobs", "submit", "training", "ray-stop", "--config", str(config),
                 "--package-path", str(FIXTURES / "trainer"), "--job-dir", str(study), "--backend", "ray",
                 "--ray-address", ray_cluster.address, "--", "--steps", "8", "--step-seconds", "0.4",
                 "--hopeless-trial", "3"]) == 0
    record = wait_until(lambda: (r := api.describe("ray-stop")).is_final and r, timeout=300, what="the study")
    assert record.state is JobState.SUCCEEDED, record.error
    output = record.details["trainingOutput"]
    assert (output["completedTrialCount"], output["failedTrialCount"], output["stoppedEarlyTrialCount"]) == (3, 0, 1)
    trials = {t["trialId"]: t for t in output["trials"]}
    assert trials["3"]["isTrialStoppedEarly"] is True and trials["3"]["stoppedAtStep"] < 8
    assert all(trials[n]["isTrialStoppedEarly"] is False and len(trials[n]["allMetrics"]) == 8 for n in ("1", "2"))
    job = JobStore(home).get("ray-stop-trial-3")
    assert job.state is JobState.CANCELLED and job.backend == "ray"
    assert not is_alive(int((study / "3" / "pid").read_text()))  # its Ray-run process is gone
    assert not (study / "3" / "ckpt-8.index").exists()


def test_a_ray_task_gets_a_private_random_signal_dir_and_a_port_another_user_takes_fails_the_job(ray_cluster, tmp_path,
                                                                                                capsys):
    import os
    import pwd
    import re

    if os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root (a second user's listener is started as nobody) and /usr/bin/python3")
    nobody = pwd.getpwnam("nobody")
    job_dir = tmp_path / "squatted"
    code = main(["launch", "--backend", "ray", "--ray-address", ray_cluster.address, "--workers", "1",
                 "--job-dir", str(job_dir), "--timeout", "120", "--", "python",
                 str(SCRIPTS / "signals_and_port_squatter.py"), str(nobody.pw_uid), str(nobody.pw_gid)])
    captured = capsys.readouterr()
    assert code == 1, captured.err[-3000:]
    assert re.search(rf"port \d+ of worker-0 is listened on by uid {nobody.pw_uid}, another user", captured.err)
    log = (job_dir / "logs" / "worker-0.log").read_text()
    found = re.search(r"signal-dir (/tmp/tfdist-signals-[0-9a-f]{32}) 0o700", log)
    assert found, log  # not the guessable <tmp>/tfdist-<uid>: a random name, made private by the task
    wait_until(lambda: not os.path.exists(found.group(1)), timeout=30, what="the task's signal dir to be removed")
    assert not processes_with(f"TFDIST_JOB_DIR={job_dir}")
