"""How a launch ended, told truthfully: tasks that did not end cleanly are named, and ``success_policy``.

Kubeflow's dist_mnist under the launcher once printed "succeeded ... exit code 0" while its ps had exited 1
and a worker had been SIGKILLed. The chief's exit 0 stays the job's success by default (TFJob's), but the
result's message and the CLI's closing line name every task that did not exit 0; with
``success_policy="all-workers"`` (TFJob's ``AllWorkers``) a worker that did not exit 0 fails the job.
Real, TensorFlow-free processes: each task follows its line of a plan.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from toolkit.launcher import LaunchError, Reason, launch

_TASK = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    plan = json.loads(sys.argv[1]).get(os.environ["TFDIST_TASK_NAME"], {"sleep": 60})
    job = Path(os.environ["TFDIST_JOB_DIR"])
    (Path(os.environ["TFDIST_TASK_DIR"]) / "started").touch()
    deadline = time.monotonic() + 30
    while not all((job / mark).exists() for mark in plan.get("after", ())) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(plan.get("sleep", 0))
    sys.exit(plan.get("exit", 0))
''')
# TF1's layout (worker-0 is the chief): the ps fails once the chief is done, worker-1 never ends by itself
_DIST_MNIST = {"worker-0": {"after": ["tasks/ps-0/started", "tasks/worker-1/started"], "sleep": 0.2},
               "ps-0": {"after": ["tasks/worker-0/ended"], "exit": 1}}


def _launch(tmp_path, plan, **kwargs):
    script = tmp_path / "task.py"
    script.write_text(_TASK)

    def on_task(event):
        if event.kind == "exited":
            (tmp_path / "job" / "tasks" / event.name / "ended").touch()

    return launch(["python", str(script), json.dumps(plan)], job_dir=tmp_path / "job", chief=0, workers=2, ps=1,
                  grace_period=2, settle_period=0.3, echo=False, on_task=on_task, **kwargs)


def test_the_chiefs_success_names_the_tasks_that_did_not_end_cleanly(tmp_path, no_orphans):
    result = _launch(tmp_path, _DIST_MNIST)
    assert result.exit_code == 0 and result.reason is Reason.SUCCEEDED
    assert result.message.startswith("the chief (worker-0) exited with code 0; not every task ended cleanly: ")
    assert "ps-0 exited with code 1" in result.message
    assert "worker-1 was stopped by the launcher (signal SIGTERM (-15))" in result.message
    assert [t.name for t in result.unclean] == ["ps-0", "worker-1"]
    assert result.task("ps-0").end == "exited with code 1" and result.task("worker-0").end == "exited with code 0"


def test_all_workers_fails_a_job_whose_worker_did_not_exit_zero(tmp_path, no_orphans):
    result = _launch(tmp_path, _DIST_MNIST, success_policy="all-workers")
    assert result.exit_code == 1 and result.reason is Reason.FAILED
    assert "worker-1 was stopped by the launcher" in result.message
    assert "the success policy all-workers needs the chief and every worker to exit 0" in result.message


def test_all_workers_waits_for_the_workers_after_the_chief(tmp_path, no_orphans):
    plan = {"worker-0": {"after": ["tasks/ps-0/started", "tasks/worker-1/started"]},
            "worker-1": {"after": ["tasks/worker-0/ended"], "sleep": 0.5},
            "ps-0": {"after": ["tasks/worker-1/ended"]}}
    result = _launch(tmp_path, plan, success_policy="all-workers")
    assert result.exit_code == 0 and result.reason is Reason.SUCCEEDED, result.message
    assert {t.name: t.exit_code for t in result.tasks} == {"ps-0": 0, "worker-0": 0, "worker-1": 0}
    assert result.unclean == () and "not every task" not in result.message


def test_an_unknown_success_policy_is_refused(tmp_path):
    with pytest.raises(LaunchError, match=r"`success_policy` is 'AllWorkers'; expected one of 'chief', "
                                          r"'all-workers'"):
        launch(["python", "-c", "pass"], job_dir=tmp_path / "job", success_policy="AllWorkers")


def test_the_cli_closing_line_names_a_failed_non_chief_task(tmp_path, no_orphans):
    script = tmp_path / "task.py"
    script.write_text(_TASK)
    plan = {"worker-0": {"after": ["tasks/ps-0/started"], "sleep": 0.3}, "ps-0": {"exit": 3, "sleep": 0.1},
            "worker-1": {}}
    cmd = [sys.executable, "-m", "toolkit", "launch", "--chief", "0", "--workers", "2", "--ps", "1", "--quiet",
           "--job-dir", str(tmp_path / "job"), "--grace-period", "1", "--no-isolate", "--", "python", str(script),
           json.dumps(plan)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    # ps-0 exited 3 before the chief and was within the settle period: the chief's 0 still ends the job
    assert proc.returncode == 0, proc.stderr
    assert "tfdist launch: succeeded" in proc.stderr
    assert "not every task ended cleanly: ps-0 exited with code 3" in proc.stderr
    assert "tasks: ps-0=3, worker-0=0, worker-1=0;" in proc.stderr
