"""A local job's record says how it ended, as it was: each task's end, and no cancel over a finished job.

Real supervisors and tasks (no TensorFlow): the trainer is a few lines of Python in a package of its own.
- A master that exits 0 while its worker is SIGKILLed: the job SUCCEEDED (the chief's policy), and the
  worker's row and the job's history say it was killed.
- A cancel whose state change lands while the tasks finish (the trainer itself writes CANCELLING as it exits
  0, as ``cancel`` would have a moment before its SIGTERM): the job ends SUCCEEDED, not CANCELLED.
"""
from __future__ import annotations

import textwrap

from _polling import wait_until

from toolkit.jobs import JobSpec, JobState, api

_TRAINER = textwrap.dedent('''
    import json, os, signal, sys, time
    from pathlib import Path
    from toolkit.jobs.storage.store import JobStore
    from toolkit.jobs.storage.states import JobState
    home, mode = sys.argv[sys.argv.index("--home") + 1], sys.argv[sys.argv.index("--mode") + 1]
    task = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
    done = Path(home) / "master-done"
    if mode == "race":
        JobStore(home).transition("ending", JobState.CANCELLING, message="cancel requested")
    elif task == "master":
        done.touch()
    else:
        deadline = time.monotonic() + 30
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the master has exited by now
        os.kill(os.getpid(), signal.SIGKILL)
''')


def _submit(tmp_path, mode: str, workers: int) -> None:
    package = tmp_path / "pkg" / "racer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(_TRAINER)
    training = {"packagePath": str(package), "pythonModule": "racer.task", "args": ["--home", str(tmp_path),
                                                                                    "--mode", mode]}
    if workers:
        training.update(scaleTier="CUSTOM", masterType="standard", workerType="standard", workerCount=workers)
    api.submit(JobSpec.from_dict({"trainingInput": training}, job_id="ending"), home=tmp_path)


def _ended(tmp_path):
    return wait_until(lambda: (r := api.describe("ending", home=tmp_path)).is_final and r, timeout=60,
                      what="the job to end")


def test_a_killed_worker_is_on_the_record_of_a_job_whose_master_succeeded(tmp_path, no_orphans):
    _submit(tmp_path, "kill", workers=1)
    record = _ended(tmp_path)
    assert record.state is JobState.SUCCEEDED, record
    worker = next(t for t in record.tasks if t.name == "worker-0")
    assert worker.exit_code == -9 and worker.end == "was killed by signal SIGKILL (-9)"
    assert worker.to_dict()["end"] == "was killed by signal SIGKILL (-9)"
    master = next(t for t in record.tasks if t.name.startswith(("master", "chief")))
    assert master.end == "exited with code 0"
    assert "not every task ended cleanly: worker-0 was killed by signal SIGKILL (-9)" in record.history[-1].message


def test_a_cancel_racing_a_job_whose_tasks_all_exited_zero_does_not_make_it_cancelled(tmp_path, no_orphans):
    _submit(tmp_path, "race", workers=0)
    record = _ended(tmp_path)
    assert [h.state.value for h in record.history][-2:] == ["CANCELLING", "SUCCEEDED"], record.history
    assert record.state is JobState.SUCCEEDED and record.exit_code == 0
    assert record.history[-1].message == "every task finished (a cancel arrived after they had)"
