"""The SQL the job store runs: transactions, reservations, closing a job's tasks, reading rows back.

Functions of a connection, kept apart from ``JobStore``'s methods (``store``) so each file reads
in one go; nothing here opens a connection or knows where the home is.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from toolkit.jobs.errors import BackendError, JobExistsError
from toolkit.jobs.storage.records import JobRecord, StateChange, TaskRecord
from toolkit.jobs.storage.states import JobState

# The launcher's task states that are not final yet; such rows are closed when their job ends (``transition``).
_LIVE_TASK_STATES = ("RUNNING", "EXITED")


@contextlib.contextmanager
def _one_line(path: Path) -> Iterator[None]:
    """SQLite's errors (a full disk, a locked or damaged file) as one line naming the store, not a traceback.
    A duplicate name (``IntegrityError``) passes through: ``create`` turns it into ``JobExistsError``."""
    try:
        yield
    except sqlite3.IntegrityError:
        raise
    except sqlite3.Error as exc:
        raise BackendError(f"the job store {path} cannot be used: {exc} ({type(exc).__name__}). Fix: free space "
                           "under the tfdist home, or check that the file is yours and not damaged "
                           "(sqlite3 jobs.db 'PRAGMA integrity_check').") from exc


def _reserve(conn: sqlite3.Connection, name: str, names: list[str], parent_job: str | None) -> None:
    """Refuses ``name`` if it is reserved for another job's child; reserves ``names`` for ``name``."""
    row = conn.execute("SELECT owner FROM reservations WHERE name = ?", (name,)).fetchone()
    if row is not None and row["owner"] != parent_job:
        raise JobExistsError(f"the name {name!r} is reserved for a trial of tuning job {row['owner']!r}. "
                             "Pick another name.")
    for reserved in dict.fromkeys(names):
        job = conn.execute("SELECT state FROM jobs WHERE name = ?", (reserved,)).fetchone()
        owner = conn.execute("SELECT owner FROM reservations WHERE name = ?", (reserved,)).fetchone()
        if job is not None or owner is not None:
            held = f"is a job already (state {job['state']})" if job is not None else \
                f"is reserved for a trial of tuning job {owner['owner']!r}"
            raise JobExistsError(f"the trials of job {name!r} are named {name}-trial-<n>, and {reserved!r} {held}. "
                                 "Pick another job name.")
    conn.executemany("INSERT INTO reservations (name, owner) VALUES (?, ?)", [(n, name) for n in dict.fromkeys(names)])


def _close_tasks(conn: sqlite3.Connection, job: str, why: str, now: float) -> None:
    """Gives every task row still open a final state and the reason, as its job ends.

    A supervisor that dies leaves rows saying RUNNING (or EXITED, with no exit
    code); once the job has an end state, so do they: STOPPED, and why.
    """
    marks = ", ".join("?" * len(_LIVE_TASK_STATES))
    rows = conn.execute(f"SELECT name, state FROM tasks WHERE job = ? AND state IN ({marks})",
                        (job, *_LIVE_TASK_STATES)).fetchall()
    for row in rows:
        reason = why if row["state"] != "EXITED" else f"its process had ended but its exit code was lost; {why}"
        conn.execute("UPDATE tasks SET state = 'STOPPED', reason = ?, updated_at = ? WHERE job = ? AND name = ?",
                     (reason, now, job, row["name"]))


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the lock up front, so read-check-write is atomic."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _drop_placeholder_trials(conn: sqlite3.Connection) -> None:
    """Schema 1 reserved a ``trials`` table that nothing wrote; Optuna needs the name."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(trials)")}
    if "trial_job" in columns and conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0:
        conn.execute("DROP TABLE trials")


def _record(row: sqlite3.Row, tasks: list[sqlite3.Row], history: list[sqlite3.Row]) -> JobRecord:
    return JobRecord(
        name=row["name"], backend=row["backend"], state=JobState(row["state"]), spec=json.loads(row["spec"]),
        created_at=row["created_at"], job_dir=row["job_dir"], started_at=row["started_at"],
        ended_at=row["ended_at"], error=row["error"], exit_code=row["exit_code"],
        warnings=tuple(json.loads(row["warnings"])), details=json.loads(row["details"]),
        tasks=tuple(TaskRecord(name=t["name"], state=t["state"], pid=t["pid"], restarts=t["restarts"],
                               exit_code=t["exit_code"], log_path=t["log_path"], updated_at=t["updated_at"],
                               reason=t["reason"])
                    for t in tasks),
        history=tuple(StateChange(JobState(h["state"]), h["at"], h["message"]) for h in history),
        parent_job=row["parent_job"],
    )
