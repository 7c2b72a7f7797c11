"""The job state machine and the SQLite store, including concurrent writers."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from toolkit.jobs import JobExistsError, JobNotFoundError, JobState, JobStateError, JobStore, default_home
from toolkit.jobs.storage.states import FINAL_STATES, TRANSITIONS, advance_path, check_transition

S = JobState


def test_transition_table_matches_the_cmle_lifecycle():
    assert TRANSITIONS[S.QUEUED] == {S.PREPARING, S.CANCELLING, S.FAILED}
    assert TRANSITIONS[S.RUNNING] == {S.SUCCEEDED, S.FAILED, S.CANCELLING}
    # a cancel that raced a job whose every task had exited 0 does not rewrite its end
    assert TRANSITIONS[S.CANCELLING] == {S.CANCELLED, S.FAILED, S.SUCCEEDED}
    assert all(not TRANSITIONS[s] for s in FINAL_STATES)


@pytest.mark.parametrize("current,new,text", [
    (S.SUCCEEDED, S.RUNNING, "job 'j' already ended SUCCEEDED; it cannot become RUNNING."),
    (S.RUNNING, S.QUEUED, "job 'j' is RUNNING; it can become CANCELLING, FAILED, SUCCEEDED, not QUEUED."),
    (S.CANCELLING, S.RUNNING, "job 'j' is CANCELLING; it can become CANCELLED, FAILED, SUCCEEDED, not RUNNING."),
])
def test_illegal_transitions_explain_themselves(current, new, text):
    with pytest.raises(JobStateError) as info:
        check_transition("j", current, new)
    assert str(info.value) == text


def test_advance_path_replays_missed_states():
    assert advance_path(S.QUEUED, S.SUCCEEDED) == [S.PREPARING, S.RUNNING, S.SUCCEEDED]
    assert advance_path(S.QUEUED, S.CANCELLED) == [S.CANCELLING, S.CANCELLED]
    assert advance_path(S.SUCCEEDED, S.FAILED) == [] and advance_path(S.RUNNING, S.RUNNING) == []


def test_default_home_reads_tfdist_home(monkeypatch, tmp_path):
    assert default_home({"TFDIST_HOME": str(tmp_path)}) == tmp_path
    assert default_home({}).name == ".tfdist"
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "h"))
    assert JobStore().path == tmp_path / "h" / "jobs.db"


def test_lifecycle_with_timestamps_tasks_and_history(tmp_path):
    store = JobStore(tmp_path)
    record = store.create("j1", backend="local", spec={"trainingInput": {"pythonModule": "m"}}, warnings=("w",))
    assert record.state is S.QUEUED and record.job_dir == str(tmp_path / "jobs" / "j1")
    store.transition("j1", S.PREPARING)
    store.update_task("j1", "worker-0", state="RUNNING", pid=4242, pid_start=7, log_path="x.log")
    running = store.transition("j1", S.RUNNING, message="3 tasks started")
    assert running.started_at is not None and running.ended_at is None
    store.update_task("j1", "worker-0", state="FAILED", exit_code=3, restarts=1)
    done = store.transition("j1", S.FAILED, error="worker-0 exited with code 3", exit_code=3)
    assert (done.error, done.exit_code, done.warnings) == ("worker-0 exited with code 3", 3, ("w",))
    assert done.ended_at >= done.started_at >= done.created_at
    assert [(h.state, h.message) for h in done.history] == [
        (S.QUEUED, "submitted"), (S.PREPARING, None), (S.RUNNING, "3 tasks started"),
        (S.FAILED, "worker-0 exited with code 3")]
    (task,) = done.tasks
    assert (task.name, task.state, task.pid, task.restarts, task.exit_code) == ("worker-0", "FAILED", 4242, 1, 3)
    assert store.task_processes("j1") == [("worker-0", 4242, 7)]
    with pytest.raises(JobStateError, match="already ended FAILED"):
        store.transition("j1", S.RUNNING)
    assert done.to_dict()["state"] == "FAILED" and done.to_dict()["trainingInput"] == {"pythonModule": "m"}


def test_store_uses_wal_and_leaves_the_trials_table_to_optuna(tmp_path):
    conn = sqlite3.connect(tmp_path / "jobs.db")  # a schema-1 store: an empty placeholder `trials` table
    conn.execute("CREATE TABLE trials (job TEXT, trial_id INTEGER, trial_job TEXT)")
    conn.commit()
    conn.close()
    JobStore(tmp_path)
    conn = sqlite3.connect(tmp_path / "jobs.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert not conn.execute("PRAGMA table_info(trials)").fetchall()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2


def test_missing_and_duplicate_jobs(tmp_path):
    store = JobStore(tmp_path)
    with pytest.raises(JobNotFoundError, match="no job named 'nope'"):
        store.get("nope")
    store.create("dup", backend="local", spec={})
    with pytest.raises(JobExistsError, match="a job named 'dup' already exists"):
        store.create("dup", backend="local", spec={})


def _submit_many(home, prefix: str, count: int, same: str) -> str:
    store = JobStore(home)
    for i in range(count):
        store.create(f"{prefix}-{i}", backend="local", spec={"i": i})
    try:
        store.create(same, backend="local", spec={})
        return "won"
    except JobExistsError:
        return "lost"


_CHILD = """
import sys
from test_jobs_store import _submit_many
print(_submit_many(sys.argv[1], sys.argv[2], 15, "same-name"))
"""


def test_concurrent_submits_from_processes_and_threads(tmp_path, no_orphans):
    here = str(Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), f"p{k}"], cwd=here,
                              stdout=subprocess.PIPE, text=True) for k in range(3)]
    outcomes: list[str] = []
    threads = [threading.Thread(target=lambda k=k: outcomes.append(
        _submit_many(tmp_path, f"t{k}", 15, "same-name"))) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["lost"] * 5 + ["won"]
    names = JobStore(tmp_path).names()
    assert len(names) == 6 * 15 + 1 and len(set(names)) == len(names)


def test_racing_transitions_have_exactly_one_winner(tmp_path):
    store = JobStore(tmp_path)
    store.create("race", backend="local", spec={})
    store.transition("race", S.PREPARING)
    store.transition("race", S.RUNNING)
    outcomes = []

    def move(state):
        try:
            JobStore(tmp_path).transition("race", state)
            outcomes.append(state)
        except JobStateError:
            outcomes.append("refused")

    threads = [threading.Thread(target=move, args=(s,)) for s in (S.SUCCEEDED, S.CANCELLING) * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [o for o in outcomes if o != "refused"]
    final = JobStore(tmp_path).get("race")
    assert len(outcomes) == 8 and len(winners) in (1, 2)
    # SUCCEEDED is final; CANCELLING may be followed by nothing else here, so the history stays legal.
    states = [h.state for h in final.history]
    for before, after in zip(states, states[1:], strict=False):
        check_transition("race", before, after)
