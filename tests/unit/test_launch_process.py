"""The launcher with real (tiny, TensorFlow-free) processes: policy, output, cleanup.

Each task runs ``_FAKE_TASK``, which follows a per-task plan (wait for other
tasks' marks, sleep, exit code, signal, spawn a grandchild) and records its
environment, so every rule of the launcher is checked against real processes
in a fraction of a second. Tasks that must act after another task did
something wait for its mark file (``wait_for``: a start file, a grandchild's
pid file, or ``exited-<restart>``, which ``_run`` writes once the launcher has
seen that exit), with a deadline, instead of sleeping for a guessed time.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from _polling import wait_until

from toolkit.launcher import LaunchError, LaunchSpec, Reason, TaskState, launch

_FAKE_TASK = textwrap.dedent('''
    import sys
    preloaded = "decimal" in sys.modules  # only a task forked from a process that imported it has it
    import json, os, signal, subprocess, time
    from pathlib import Path
    plan = json.loads(sys.argv[1])
    name = os.environ["TFDIST_TASK_NAME"]
    restart = int(os.environ["TFDIST_RESTART_COUNT"])
    task_dir = Path(os.environ["TFDIST_TASK_DIR"])
    start = task_dir / f"start-{restart}.json"
    start.with_suffix(".tmp").write_text(json.dumps({
        "tf_config": json.loads(os.environ["TF_CONFIG"]), "job_dir": os.environ["TFDIST_JOB_DIR"],
        "task_dir": str(task_dir), "pid": os.getpid(), "ppid": os.getppid(), "preloaded": preloaded, "cwd": os.getcwd(),
        "executable": sys.executable,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("TFDIST_", "CLOUD_ML_"))}}))
    start.with_suffix(".tmp").rename(start)  # complete when it appears: other tasks wait for it
    print(f"{name} start {restart}", flush=True)
    steps = plan.get(name, plan.get("*", [{"sleep": 60}]))
    action = steps[min(restart, len(steps) - 1)]
    if action.get("spawn"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        (task_dir / "grandchild.pid.tmp").write_text(str(child.pid))
        (task_dir / "grandchild.pid.tmp").rename(task_dir / "grandchild.pid")
    marks = [task_dir.parent / mark for mark in action.get("wait_for", ())]
    deadline = time.monotonic() + 60
    while not all(mark.exists() for mark in marks):
        if time.monotonic() > deadline:
            print(f"{name} gave up waiting for {[str(m) for m in marks if not m.exists()]}", flush=True)
            sys.exit(99)
        time.sleep(0.02)
    time.sleep(action.get("sleep", 0))
    print(f"{name} last words", flush=True)
    if "kill" in action:
        os.kill(os.getpid(), action["kill"])
    sys.exit(action.get("exit", 0))
''')


@pytest.fixture(params=["fresh", "forked"])
def fake(request, tmp_path):
    """The fake task's command; every test using it runs twice: tasks as fresh interpreters, and forked from
    a preload process (``preload=``, ``--preload``), which must not change anything the launcher promises."""
    script = tmp_path / "fake_task.py"
    script.write_text(_FAKE_TASK)

    def command(plan):
        return ["python", str(script), json.dumps(plan)]

    command.preload = ("json", "decimal") if request.param == "forked" else ()
    command.flags = ["--preload", "json,decimal"] if request.param == "forked" else []
    return command


def _run(fake, plan, tmp_path, **kwargs):
    """Launches the fake tasks; ``tasks/<name>/exited-<restart>`` appears once the launcher has seen that exit."""
    stream = io.StringIO()
    kwargs.setdefault("grace_period", 0.5)
    kwargs.setdefault("settle_period", 0.3)
    observer = kwargs.pop("on_task", None)

    def on_task(event):
        if event.kind == "exited":
            (tmp_path / "job" / "tasks" / event.name / f"exited-{event.restarts}").touch()
        if observer is not None:
            observer(event)

    kwargs.setdefault("preload", fake.preload)
    result = launch(fake(plan), job_dir=tmp_path / "job", stream=stream, on_task=on_task, **kwargs)
    for start in (tmp_path / "job" / "tasks").glob("*/start-*.json"):  # each task ran the way it was asked to
        seen = json.loads(start.read_text())
        assert seen["preloaded"] == bool(kwargs["preload"]), start
        assert (seen["ppid"] == os.getpid()) != bool(kwargs["preload"]), start  # forked: the preload process's
    return result, stream.getvalue()


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def _started(result, name, restart=0):
    return json.loads((result.job_dir / "tasks" / name / f"start-{restart}.json").read_text())


def test_chief_ends_the_job_others_are_stopped_and_output_is_prefixed(fake, tmp_path, no_orphans):
    result, out = _run(fake, {"chief-0": [{"wait_for": ["ps-0/start-0.json", "worker-0/start-0.json",
                                                           "worker-1/start-0.json"]}]},
                       tmp_path, workers=2, ps=1)
    assert result.exit_code == 0 and result.reason == "succeeded" and result.ok
    assert [t.name for t in result.tasks] == ["ps-0", "chief-0", "worker-0", "worker-1"]
    assert result.task("chief-0").exit_code == 0 and not result.task("chief-0").stopped
    for name in ("ps-0", "worker-0", "worker-1"):
        assert result.task(name).stopped and result.task(name).exit_code == -signal.SIGTERM
    for name in ("ps-0", "chief-0", "worker-0", "worker-1"):
        assert f"[{name}] {name} start 0" in out.splitlines()
        assert f"{name} start 0" in (result.job_dir / "logs" / f"{name}.log").read_text()
    assert "[chief-0] chief-0 last words" in out


def test_each_task_gets_its_own_tf_config_and_directories(fake, tmp_path, no_orphans):
    metric_file = str(tmp_path / "trial" / "hypertune" / "output.metrics")  # a tuning trial's, for every task
    result, _ = _run(fake, {"*": [{"exit": 0}]}, tmp_path, workers=2, ps=1, evaluator=1,
                     env={"CLOUD_ML_HP_METRIC_FILE": metric_file})
    cluster = json.loads((result.job_dir / "cluster.json").read_text())["cluster"]
    assert sorted(cluster) == ["chief", "evaluator", "ps", "worker"]
    addresses = [a for addrs in cluster.values() for a in addrs]
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(set(addresses)) == 5
    for task in result.tasks:
        seen = _started(result, task.name)
        assert seen["tf_config"]["task"] == {"type": task.task_type, "index": task.index}
        assert seen["tf_config"]["cluster"] == cluster
        assert seen["job_dir"] == str(result.job_dir)
        assert seen["task_dir"] == str(result.job_dir / "tasks" / task.name)
        # cloudml-hypertune rewrites its whole file: the chief keeps the trial's, every other task has its own
        own = metric_file if task.name == "chief-0" else f"{metric_file}.{task.name}"
        assert seen["env"]["CLOUD_ML_HP_METRIC_FILE"] == own


def test_chief_exit_code_is_the_jobs_and_failure_shows_its_log_tail(fake, tmp_path, no_orphans):
    result, _ = _run(fake, {"worker-0": [{"exit": 3}]}, tmp_path, workers=2)
    assert result.exit_code == 3 and result.reason == "failed"
    assert "the chief (worker-0) exited with code 3" in result.message
    assert "worker-0 last words" in result.message
    assert str(result.job_dir / "logs" / "worker-0.log") in result.message


def test_chief_killed_by_a_signal_gives_128_plus_signal(fake, tmp_path, no_orphans):
    result, _ = _run(fake, {"chief-0": [{"kill": signal.SIGKILL}]}, tmp_path, workers=1, ps=1)
    assert result.exit_code == 128 + signal.SIGKILL
    assert "signal SIGKILL (-9)" in result.message


def test_dead_ps_worker_is_restarted_alone_with_the_same_tf_config(fake, tmp_path, no_orphans):
    plan = {"chief-0": [{"wait_for": ["worker-1/start-1.json"]}], "worker-1": [{"exit": 7}, {"sleep": 60}]}
    result, out = _run(fake, plan, tmp_path, workers=2, ps=1, max_restarts=1)
    assert result.exit_code == 0, result.message
    assert result.task("worker-1").restarts == 1 and result.task("worker-0").restarts == 0
    assert result.cluster_restarts == 0
    assert _started(result, "worker-1", 1)["tf_config"] == _started(result, "worker-1", 0)["tf_config"]
    assert "[worker-1] worker-1 start 1" in out
    assert "restarted (start #2)" in (result.job_dir / "logs" / "worker-1.log").read_text()


def test_ps_worker_out_of_restarts_fails_the_job_naming_it(fake, tmp_path, no_orphans):
    result, _ = _run(fake, {"worker-1": [{"exit": 7}]}, tmp_path, workers=2, ps=1, max_restarts=0)
    assert result.exit_code == 1 and result.reason == "failed"
    assert result.message.startswith("worker-1 exited with code 7 and could not be restarted (max_restarts=0)")
    assert "worker-1 last words" in result.message
    assert result.task("chief-0").stopped


def test_mwms_death_restarts_the_whole_cluster_when_restartable(fake, tmp_path, no_orphans):
    plan = {"worker-0": [{"sleep": 60}, {"wait_for": ["worker-1/start-1.json"]}],
            "worker-1": [{"exit": 5}, {"sleep": 60}]}
    result, _ = _run(fake, plan, tmp_path, workers=2, max_restarts=1, restartable=True)
    assert result.exit_code == 0, result.message
    assert result.cluster_restarts == 1
    assert [t.restarts for t in result.tasks] == [1, 1]
    first, second = _started(result, "worker-0", 0), _started(result, "worker-0", 1)
    assert first["tf_config"]["cluster"] != second["tf_config"]["cluster"]  # fresh ports


def test_mwms_death_without_restartable_fails_with_the_task_and_its_code(fake, tmp_path, no_orphans):
    result, _ = _run(fake, {"worker-1": [{"exit": 5}]}, tmp_path, workers=2, max_restarts=3)
    assert result.exit_code == 1 and result.cluster_restarts == 0
    assert "worker-1 exited with code 5 and the job cannot recover (the entrypoint is not restartable)" \
        in result.message


def test_failed_server_leaving_just_before_the_chief_is_the_chiefs_failure(fake, tmp_path, no_orphans):
    plan = {"chief-0": [{"wait_for": ["worker-0/exited-0"], "exit": 1}], "worker-0": [{"exit": 1}]}
    result, _ = _run(fake, plan, tmp_path, workers=1, ps=1, max_restarts=2, settle_period=5)
    assert result.exit_code == 1
    assert result.task("worker-0").restarts == 0  # not mistaken for a crash
    assert "the chief (chief-0) exited with code 1" in result.message
    assert "The first task to fail was worker-0" in result.message


def test_evaluator_failure_does_not_fail_the_job(fake, tmp_path, no_orphans):
    plan = {"evaluator-0": [{"exit": 9}], "worker-0": [{"wait_for": ["evaluator-0/exited-0"]}]}
    result, _ = _run(fake, plan, tmp_path, workers=1, evaluator=1)
    assert result.exit_code == 0
    assert result.task("evaluator-0").exit_code == 9 and result.task("evaluator-0").restarts == 0


def test_timeout_stops_everything_with_124(fake, tmp_path, no_orphans):
    started = time.monotonic()
    result, _ = _run(fake, {}, tmp_path, workers=2, timeout=1)
    assert result.exit_code == 124 and result.reason == "timeout"
    assert all(t.stopped for t in result.tasks)
    assert time.monotonic() - started < 30


def test_stopping_a_task_takes_its_grandchildren_too(fake, tmp_path, no_orphans):
    result, _ = _run(fake, {"worker-0": [{"wait_for": ["worker-1/grandchild.pid"]}],
                                 "worker-1": [{"spawn": True, "sleep": 60}]},
                     tmp_path, workers=2)
    assert result.exit_code == 0
    grandchild = int((result.job_dir / "tasks" / "worker-1" / "grandchild.pid").read_text())
    assert not _alive(grandchild)


def test_sigterm_to_the_launcher_stops_every_task(fake, tmp_path, no_orphans):
    job = tmp_path / "job"
    cmd = [sys.executable, "-m", "toolkit", "launch", "--workers", "2", "--ps", "1", "--job-dir", str(job),
           *fake.flags, "--", *fake({"*": [{"spawn": True, "sleep": 60}]})]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pid_files = [job / "tasks" / n / "grandchild.pid" for n in ("ps-0", "chief-0", "worker-0", "worker-1")]
    wait_until(lambda: all(p.exists() for p in pid_files), timeout=60, what="every task's grandchild")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out.decode()
    assert b"interrupted by SIGTERM" in out
    assert not any(_alive(int(p.read_text())) for p in pid_files)


def test_sigkill_to_the_launcher_takes_every_task_with_it(fake, tmp_path, no_orphans):
    """Nothing of the launcher runs after SIGKILL; the kernel's parent-death signal ends the tasks."""
    job = tmp_path / "job"
    cmd = [sys.executable, "-m", "toolkit", "launch", "--workers", "2", "--ps", "1", "--job-dir", str(job),
           "--chief-lost-after", "20", *fake.flags, "--", *fake({"*": [{"sleep": 120}]})]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    names = ("ps-0", "chief-0", "worker-0", "worker-1")
    starts = [job / "tasks" / n / "start-0.json" for n in names]
    wait_until(lambda: all(p.exists() for p in starts), timeout=60, what="every task to start")
    started = [json.loads(p.read_text()) for p in starts]
    proc.kill()
    proc.wait(timeout=30)
    wait_until(lambda: not any(_alive(s["pid"]) for s in started), timeout=30,
               what=f"the tasks to die with the launcher: {names}")
    # every task of the job shares one nonce (its goodbye files) and the servers' timeouts
    assert len({s["env"]["TFDIST_JOB_NONCE"] for s in started}) == 1
    assert {s["env"]["TFDIST_CHIEF_LOST_AFTER"] for s in started} == {"20"}


@pytest.mark.parametrize("kwargs, field, text", [
    ({"dialect": "cmle", "chief": 0}, "chief", "`chief` is 0 with `dialect='cmle'`: a Cloud ML Engine job always"),
    ({"workers": 0}, "workers", "`workers` is 0 and `chief` is 0"),
    ({"workers": -1}, "workers", "`workers` is -1; expected an integer >= 0"),
    ({"evaluator": 2}, "evaluator", "`evaluator` is 2; a cluster has at most one"),
    ({"timeout": 0}, "timeout", "`timeout` is 0; expected a positive number of seconds"),
    ({"dialect": "tf3"}, "dialect", "`dialect` is 'tf3'; expected one of 'tf', 'cmle'"),
    ({"cwd": "/no/such/dir"}, "cwd", "`cwd` is '/no/such/dir'; expected an existing directory"),
])
def test_bad_arguments_are_rejected_before_anything_starts(tmp_path, kwargs, field, text):
    with pytest.raises(LaunchError) as info:
        launch(["python", "-c", "pass"], job_dir=tmp_path / "job", **kwargs)
    assert info.value.field == field and text in str(info.value)
    assert not (tmp_path / "job").exists()


def test_missing_entrypoint_and_string_command_are_rejected(tmp_path):
    with pytest.raises(LaunchError, match="'no-such-program-xyz' was not found"):
        launch(["no-such-program-xyz"], job_dir=tmp_path / "job")
    with pytest.raises(LaunchError, match="expected the entrypoint as a list of strings"):
        launch("python train.py", job_dir=tmp_path / "job")


def test_python_means_the_launchers_interpreter(fake, tmp_path, no_orphans):
    result, out = _run(fake, {"*": [{"exit": 0}]}, tmp_path, workers=1)
    assert result.exit_code == 0 and "[worker-0] worker-0 start 0" in out
    assert _started(result, "worker-0")["executable"] == sys.executable  # not whatever `python` is on PATH


class _ClosedConsole(io.StringIO):
    def write(self, text):
        raise BrokenPipeError("console closed")


def test_a_closed_console_does_not_block_the_tasks(fake, tmp_path, no_orphans):
    lines = [{"sleep": 0.2}]
    result = launch(fake({"worker-0": lines}), workers=1, job_dir=tmp_path / "job", stream=_ClosedConsole(),
                    preload=fake.preload, grace_period=0.5)
    assert result.exit_code == 0
    assert "worker-0 last words" in result.task("worker-0").log_path.read_text()


# Lines a TensorFlow 2.21 task printed on this CPU machine before its first line of training output.
_TF_NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    ("I0000 00:00:1795354330.233572    7086 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. "
    "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`."),
    ("I0000 00:00:1795354330.234016    7086 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used."),
    ("I0000 00:00:1795354330.279334    7086 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations."),
    ("To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags."),
    ("E0000 00:00:1795354333.976167    7086 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)"),
    "2024-03-01 10:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.",
    ("W0000 00:00:1795371090.953979   31402 local_rendezvous.cc:412] Local rendezvous is aborting with status: "
     "ABORTED: Cleanup -6283041159023261540 [type.googleapis.com/tensorflow.DerivedStatus='']"),
    "W0000 00:00:1795371090.953979   31402 grpc_worker_service.cc:475] RecvTensor cancelled for 6283041159023261540",
    "I0000 00:00:1795356655.077312    2682 eager_service_impl.cc:355] SessionOptions: goo.gle/debugproto    ",
    "device_count {", '  key: "CPU"', "  value: 1", "}", "gpu_options {", "  experimental {", "  }", "}",
    "allow_soft_placement: true", "experimental {",
    '  collective_group_leader: "/job:worker/replica:0/task:0"', "}", "",
]
_KEPT = ["E0000 00:00:1795354333.976167    7086 grpc_server_lib.cc:52] Address already in use",
         "W0000 00:00:1795354333.976167    7086 op_kernel.cc:1829] OP_REQUIRES failed: not found",
         "epoch 1: loss 0.25"]


@pytest.mark.parametrize("verbose, level, shown", [(False, None, False), (True, None, True), (False, "0", True)])
def test_tensorflow_noise_stays_off_the_console_but_in_the_log(tmp_path, monkeypatch, no_orphans, verbose, level,
                                                               shown):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    text = "\n".join(_TF_NOISE + _KEPT)
    code = f"import os; print('level=' + os.environ.get('TF_CPP_MIN_LOG_LEVEL', 'unset')); print({text!r})"
    console = io.StringIO()
    result = launch(["python", "-c", code], workers=1, job_dir=tmp_path / "job", stream=console, verbose=verbose,
                    env=None if level is None else {"TF_CPP_MIN_LOG_LEVEL": level})
    assert result.exit_code == 0
    log = (result.job_dir / "logs" / "worker-0.log").read_text()
    assert f"level={level or 'unset'}" in log  # the log level is the user's choice; none is forced on the task
    for line in _TF_NOISE + _KEPT:
        assert line in log
        if line.strip() not in ("}", ""):  # too common to look for
            assert (f"[worker-0] {line}\n" in console.getvalue()) == (shown or line in _KEPT), line
    if not shown:
        assert console.getvalue().splitlines()[1:] == [f"[worker-0] {line}" for line in _KEPT]


def test_on_task_reports_every_start_restart_and_exit_as_it_happens(fake, tmp_path, no_orphans):
    events = []
    plan = {"worker-0": [{"exit": 3}, {"exit": 0}], "ps-0": [{"sleep": 60}],
            "chief-0": [{"wait_for": ["worker-0/exited-1"]}]}
    result, _ = _run(fake, plan, tmp_path, workers=1, ps=1, max_restarts=1, on_task=events.append)
    assert result.exit_code == 0
    worker = [(e.kind, e.restarts, e.exit_code) for e in events if e.name == "worker-0"]
    assert worker == [("started", 0, None), ("exited", 0, 3), ("started", 1, None), ("exited", 1, 0)]
    starts = {e.name: e.pid for e in events if e.kind == "started" and e.restarts == 0}
    assert set(starts) == {"ps-0", "chief-0", "worker-0"}
    assert all(e.log_path == result.job_dir / "logs" / f"{e.name}.log" for e in events)
    ps_exit = [e for e in events if e.name == "ps-0" and e.kind == "exited"]
    assert len(ps_exit) == 1 and ps_exit[0].pid == starts["ps-0"] and ps_exit[0].exit_code != 0  # stopped


def test_a_failing_on_task_callback_does_not_break_the_job(fake, tmp_path, no_orphans):
    def broken(event):
        raise RuntimeError("observer bug")

    result, _ = _run(fake, {"*": [{"exit": 0}]}, tmp_path, workers=1, on_task=broken)
    assert result.exit_code == 0


def test_cmle_dialect_names_the_master_everywhere_and_cwd_is_where_tasks_run(fake, tmp_path, no_orphans):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plan = {"master-0": [{"sleep": 0.3, "exit": 4}], "worker-0": [{"sleep": 60}]}
    spec = LaunchSpec(cmd=tuple(fake(plan)), workers=1, ps=1, dialect="cmle", cwd=run_dir, grace_period=0.5)
    stream = io.StringIO()
    result = launch(spec, job_dir=tmp_path / "job", stream=stream)
    assert [t.name for t in result.tasks] == ["ps-0", "master-0", "worker-0"]
    assert result.exit_code == 4 and result.reason is Reason.FAILED and result.reason == "failed"
    assert "the chief (master-0) exited with code 4" in result.message and "chief-0" not in result.message
    assert [t.state for t in result.tasks] == [TaskState.STOPPED, TaskState.FAILED, TaskState.STOPPED]
    logs = sorted(p.name for p in (result.job_dir / "logs").iterdir())
    assert logs == ["master-0.log", "ps-0.log", "worker-0.log"] and "[master-0] master-0 start 0" in stream.getvalue()
    master = _started(result, "master-0")
    assert master["tf_config"]["task"] == {"type": "master", "index": 0}
    assert sorted(master["tf_config"]["cluster"]) == ["master", "ps", "worker"]
    assert master["tf_config"]["environment"] == "cloud" and master["cwd"] == str(run_dir)
    assert _started(result, "worker-0")["tf_config"]["cluster"] == master["tf_config"]["cluster"]


@pytest.mark.parametrize("dialect", ["tf", "tfjob"])
def test_tf1_between_graph_layout_worker_0_is_the_chief(fake, tmp_path, no_orphans, dialect):
    # TF1's between-graph layout (Kubeflow's dist_mnist): ps and workers, no chief; the job ends with worker 0.
    plan = {"worker-0": [{"wait_for": ["worker-1/start-0.json"], "sleep": 0.2, "exit": 0}],
            "worker-1": [{"exit": 0}], "ps-0": [{"sleep": 60}]}
    result, out = _run(fake, plan, tmp_path, chief=0, workers=2, ps=1, dialect=dialect)
    assert [t.name for t in result.tasks] == ["ps-0", "worker-0", "worker-1"]
    assert result.exit_code == 0 and result.reason is Reason.SUCCEEDED
    assert "the chief (worker-0) exited with code 0" in result.message
    worker = _started(result, "worker-1")["tf_config"]
    assert sorted(worker["cluster"]) == ["ps", "worker"] and worker["task"] == {"type": "worker", "index": 1}
    assert all(address.startswith("127.0.0.1:") for addresses in worker["cluster"].values() for address in addresses)
    assert worker.get("environment") == ("cloud" if dialect == "tfjob" else None)


def test_launch_defaults_cmle_to_a_master(tmp_path):
    assert LaunchSpec(cmd=("python", "-c", "pass"), workers=2, dialect="cmle").chief == 1
    assert LaunchSpec(cmd=("python", "-c", "pass"), workers=2, dialect="tfjob").chief == 0
    assert LaunchSpec(cmd=("python", "-c", "pass"), workers=2, ps=1, dialect="tfjob").chief == 1


def test_launch_takes_a_spec_or_its_fields_never_both(tmp_path):
    spec = LaunchSpec(cmd=("python", "-c", "pass"))
    with pytest.raises(TypeError, match="got a LaunchSpec and also workers"):
        launch(spec, workers=2, job_dir=tmp_path / "job")
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) worker; the LaunchSpec fields are"):
        launch(["python", "-c", "pass"], worker=2, job_dir=tmp_path / "job")
    assert not (tmp_path / "job").exists()


def test_a_bad_preemption_grace_in_the_environment_stops_the_launch_before_any_task(tmp_path):
    """The launcher reads the tasks' grace through ServeOptions, as the tasks do, and refuses what they would."""
    from strategies import StrategyError

    with pytest.raises(StrategyError) as info:
        launch(["python", "-c", "pass"], job_dir=tmp_path / "job", env={"TFDIST_PREEMPTION_GRACE": "soon"})
    assert info.value.field == "preemption_grace" and "TFDIST_PREEMPTION_GRACE) is 'soon'" in str(info.value)
    assert not (tmp_path / "job").exists()
