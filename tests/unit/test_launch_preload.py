"""Tasks forked from a preload process (``launch(..., preload=...)``, ``tfdist launch --preload``).

The launcher's own promises (policy, output, signals, cleanup) are checked for
forked tasks by every test of ``test_launch_process.py``, which runs each case
both ways. These tests check what is particular to forking: the task runs its
script exactly as ``python`` would, bad input is refused before anything
starts, and a preload process that dies takes its tasks with it and is
replaced on a restart. The tasks are tiny scripts that preload only the
standard library, so each test takes about a second.
"""
from __future__ import annotations

import io
import json
import logging
import os
import textwrap

import pytest

from toolkit.cli import build_parser
from toolkit.cli._flags import LAUNCH_FLAGS, error_text
from toolkit.launcher import LaunchError, launch

_REPORT = textwrap.dedent('''
    import sys
    preloaded = "decimal" in sys.modules
    import atexit, json, os, threading, time
    from pathlib import Path
    task_dir = Path(os.environ["TFDIST_TASK_DIR"])
    (task_dir / "seen.json").write_text(json.dumps({
        "preloaded": preloaded, "name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
        "task": json.loads(os.environ["TF_CONFIG"])["task"], "ppid": os.getppid(), "pid": os.getpid(),
        "only_mine": os.environ.get("ONLY_ONE_TASK")}))
    atexit.register(lambda: (task_dir / "atexit").write_text("ran"))
    def late():
        time.sleep(0.3)
        (task_dir / "thread").write_text("joined")
    threading.Thread(target=late).start()  # not a daemon: the interpreter's exit waits for it
    print("reporting from", os.environ["TFDIST_TASK_NAME"], flush=True)
    if os.environ["TFDIST_TASK_NAME"] == "worker-0":
        sys.exit(3)
''')


def _seen(job_dir, task):
    return json.loads((job_dir / "tasks" / task / "seen.json").read_text())


def test_a_forked_task_runs_its_script_as_python_would(tmp_path, no_orphans):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "report.py").write_text(_REPORT)
    stream = io.StringIO()
    result = launch(["python", "report.py", "--flag", "x"], workers=1, ps=1, cwd=tmp_path / "work",
                    job_dir=tmp_path / "job", preload=("decimal",), stream=stream, grace_period=5)
    assert result.task("chief-0").exit_code == 0 and result.task("worker-0").exit_code == 3
    for task in ("ps-0", "chief-0", "worker-0"):
        seen = _seen(result.job_dir, task)
        assert seen["preloaded"] and seen["ppid"] != os.getpid()  # forked, from the preload process
        assert seen["name"] == "__main__" and seen["argv"] == ["report.py", "--flag", "x"]
        assert seen["path0"] == seen["cwd"] == str(tmp_path / "work")
        assert seen["task"]["type"] == task.split("-")[0]
        assert (result.job_dir / "tasks" / task / "atexit").read_text() == "ran"
        assert (result.job_dir / "tasks" / task / "thread").read_text() == "joined"
        assert f"[{task}] reporting from {task}" in stream.getvalue()
    assert len({_seen(result.job_dir, t)["ppid"] for t in ("ps-0", "chief-0", "worker-0")}) == 1


def test_a_module_runs_under_dash_m_with_the_working_directory_first_on_its_path(tmp_path, no_orphans):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "report.py").write_text(_REPORT)
    result = launch(["python", "-m", "pkg.report", "a"], workers=1, cwd=tmp_path, job_dir=tmp_path / "job",
                    preload="json,decimal", echo=False)
    assert result.exit_code == 3  # worker-0 is the chief here, and leaves with sys.exit(3)
    seen = _seen(result.job_dir, "worker-0")
    assert seen["preloaded"] and seen["name"] == "__main__"
    assert seen["argv"] == [str(tmp_path / "pkg" / "report.py"), "a"] and seen["path0"] == str(tmp_path)


def test_an_uncaught_exception_prints_the_scripts_traceback_and_exits_1(tmp_path, no_orphans):
    script = tmp_path / "fails.py"
    script.write_text("import sys\n\ndef go():\n    raise ValueError('the task failed')\n\ngo()\n")
    result = launch(["python", str(script)], workers=1, job_dir=tmp_path / "job", preload=("json",), echo=False)
    assert result.exit_code == 1
    log = result.task("worker-0").log_path.read_text()
    assert log.startswith("Traceback (most recent call last):\n" f'  File "{script}", line 6, in <module>\n')
    assert "ValueError: the task failed" in log
    assert "_zygote" not in log and "runpy" not in log  # only the script's frames, as python prints them


def test_each_task_gets_its_own_environment(tmp_path, no_orphans):
    (tmp_path / "report.py").write_text(_REPORT)
    result = launch(["python", str(tmp_path / "report.py")], workers=2, job_dir=tmp_path / "job",
                    preload=("decimal",), env={"ONLY_ONE_TASK": "given"}, echo=False, grace_period=5)
    tasks = {t: _seen(result.job_dir, t) for t in ("worker-0", "worker-1")}
    assert {t: s["task"]["index"] for t, s in tasks.items()} == {"worker-0": 0, "worker-1": 1}
    assert all(s["only_mine"] == "given" for s in tasks.values())


@pytest.mark.parametrize("cmd, preload, text", [
    (["python", "-c", "pass"], ("json",), "the command passes the interpreter option '-c'"),
    (["python", "missing.py"], ("json",), "the script 'missing.py' does not exist in"),
    (["python"], ("json",), "the command names no script"),
    (["sh", "-c", "true"], ("json",), "the command runs 'sh'; preloaded tasks are forks of this interpreter"),
    (["python", "x.py"], ("json", "not a module"), "'not a module' is not a module name"),
    (["python", "x.py"], 3, "`preload` is 3; expected module names"),
])
def test_commands_and_modules_that_cannot_be_preloaded_are_refused_before_anything_starts(tmp_path, cmd, preload,
                                                                                          text):
    (tmp_path / "x.py").write_text("")
    with pytest.raises(LaunchError) as info:
        launch(cmd, workers=1, cwd=tmp_path, job_dir=tmp_path / "job", preload=preload)
    assert info.value.field == "preload" and text in str(info.value)
    assert "Without `preload`, every task starts as a fresh interpreter." in str(info.value)
    assert not (tmp_path / "job").exists()


def test_a_module_that_does_not_import_fails_the_launch_and_no_task_starts(tmp_path, no_orphans):
    (tmp_path / "report.py").write_text(_REPORT)
    with pytest.raises(LaunchError) as info:
        launch(["python", str(tmp_path / "report.py")], workers=2, ps=1, job_dir=tmp_path / "job",
               preload=("json", "no_such_module_xyz"), echo=False)
    message = str(info.value)
    assert info.value.field == "preload" and "so no task was started" in message
    assert "importing 'no_such_module_xyz' failed: ModuleNotFoundError: No module named 'no_such_module_xyz'" \
        in message
    assert "ModuleNotFoundError" in (tmp_path / "job" / "logs" / "preload.log").read_text()
    assert not list((tmp_path / "job" / "tasks").glob("*/seen.json"))
    assert all(log.stat().st_size == 0 for log in (tmp_path / "job" / "logs").glob("*-*.log"))
    # and the CLI names the flag
    assert error_text(info.value, LAUNCH_FLAGS).startswith("`--preload` failed, so no task was started")


_KILLS_ITS_PARENT = textwrap.dedent('''
    import os, signal, sys, time
    from pathlib import Path
    restart = os.environ["TFDIST_RESTART_COUNT"]
    Path(os.environ["TFDIST_TASK_DIR"], f"parent-{restart}").write_text(str(os.getppid()))
    if os.environ["TFDIST_TASK_NAME"] == "worker-1" and restart == "0":
        time.sleep(0.5)
        os.kill(os.getppid(), signal.SIGKILL)  # the preload process
    time.sleep(0 if restart != "0" else 60)
''')


def test_a_dead_preload_process_takes_its_tasks_and_a_restart_forks_from_a_new_one(tmp_path, no_orphans, caplog):
    script = tmp_path / "kills.py"
    script.write_text(_KILLS_ITS_PARENT)
    with caplog.at_level(logging.WARNING, logger="toolkit.launcher"):
        result = launch(["python", str(script)], workers=2, job_dir=tmp_path / "job", preload=("json",),
                        restartable=True, max_restarts=1, echo=False, settle_period=0.3, grace_period=5)
    assert result.exit_code == 0 and result.cluster_restarts == 1, result.message
    assert "the preload process has exited; starting a new one" in caplog.text
    parents = {n: [(tmp_path / "job" / "tasks" / n / f"parent-{r}").read_text() for r in (0, 1)]
               for n in ("worker-0", "worker-1")}
    first, second = {p[0] for p in parents.values()}, {p[1] for p in parents.values()}
    assert len(first) == len(second) == 1 and first != second  # one preload process per cluster run
    assert not os.path.exists(f"/proc/{first.pop()}")


def test_the_ray_backend_refuses_preload_before_connecting(tmp_path):
    from toolkit.launcher.ray import launch_ray

    with pytest.raises(LaunchError) as info:
        launch_ray(["python", "-m", "json.tool"], workers=1, job_dir=tmp_path / "job", preload="json",
                   address="ray://nowhere:1")
    assert info.value.field == "preload" and "on Ray every task is an actor" in str(info.value)


def test_the_cli_flag_alone_preloads_tensorflow_and_keras():
    parse = build_parser().parse_args
    assert parse(["launch", "--preload", "--", "python", "t.py"]).preload == "tensorflow,keras"
    assert parse(["launch", "--preload", "json,decimal", "--", "python", "t.py"]).preload == "json,decimal"
    assert parse(["launch", "--", "python", "t.py"]).preload == ""


@pytest.mark.parametrize("isolate", [True, False])
def test_forked_tasks_share_the_clusters_private_network_namespace(tmp_path, no_orphans, isolate):
    from toolkit.launcher.local._isolation import unavailable_reason

    if isolate and unavailable_reason() is not None:
        pytest.skip(f"no network isolation here: {unavailable_reason()}")
    script = tmp_path / "netns.py"
    script.write_text("import os, sys\nprint('netns', os.readlink('/proc/self/ns/net'), 'decimal' in sys.modules)\n")
    stream = io.StringIO()
    result = launch(["python", str(script)], workers=2, job_dir=tmp_path / "job", preload=("decimal",),
                    isolate=isolate, stream=stream, grace_period=5)
    seen = {line.split("netns ", 1)[1] for line in stream.getvalue().splitlines() if "netns " in line}
    assert result.exit_code == 0 and len(seen) == 1  # both forked tasks, in one namespace...
    namespace, preloaded = seen.pop().split()
    assert preloaded == "True"
    assert (namespace != os.readlink("/proc/self/ns/net")) == isolate  # ...the cluster's own, or ours
