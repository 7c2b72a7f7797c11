"""Local jobs past ``max_running`` wait QUEUED (their supervisor alive, no task started) until one ends.

20 trivial submits once started 60 processes at once; a queue bounds that by the machine's capacity.
Real supervisors and tasks: the first job's task waits for a release file.
"""
from __future__ import annotations

import textwrap

import pytest
from _polling import wait_until

from toolkit.jobs import JobSpec, JobSpecError, JobState, api

_TASK = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    release = Path(sys.argv[1])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
''')


def _spec(tmp_path, name: str):
    package = tmp_path / "pkg" / "waiter"
    if not package.exists():
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "task.py").write_text(_TASK)
    return JobSpec.from_dict({"trainingInput": {"packagePath": str(package), "pythonModule": "waiter.task",
                                                "args": [str(tmp_path / "release")]}}, job_id=name)


def test_a_job_past_max_running_waits_queued_until_the_running_one_ends(tmp_path, no_orphans):
    home = tmp_path / "home"
    api.submit(_spec(tmp_path, "first"), home=home, max_running=1)
    wait_until(lambda: api.describe("first", home=home).state is JobState.RUNNING, timeout=60,
               what="the first job to run")
    api.submit(_spec(tmp_path, "second"), home=home, max_running=1)
    queued = api.describe("second", home=home)
    wait_until(lambda: any("is queued" in line for line in
                           (home / "jobs" / "second" / "supervisor.log").read_text().splitlines()),
               timeout=30, what="the second job's supervisor to see no room")
    assert api.describe("second", home=home).state is JobState.QUEUED and queued.details["maxRunning"] == 1
    assert api.describe("second", home=home).tasks == ()  # nothing started
    (tmp_path / "release").touch()
    first, second = (wait_until(lambda n=n: (r := api.describe(n, home=home)).is_final and r, timeout=60,
                                what=f"{n} to end") for n in ("first", "second"))
    assert first.state is JobState.SUCCEEDED and second.state is JobState.SUCCEEDED
    assert second.history[1].state is JobState.PREPARING and second.history[1].at >= first.ended_at


def test_max_running_is_a_positive_whole_number(tmp_path):
    with pytest.raises(JobSpecError, match=r"max_running: received 0; expected a whole number from 1 to 10,000"):
        api.submit(_spec(tmp_path, "bad"), home=tmp_path / "home", max_running=0)
