"""Job records in SQLite under ``$TFDIST_HOME`` (default ``~/.tfdist``).

SQLite because several processes write at once: the CLI submitting, a detached
supervisor per job moving it through its states, ``cancel`` from another
terminal. WAL mode lets readers proceed while one writer commits; every state
change runs in ``BEGIN IMMEDIATE`` so the read-check-write of a transition is
atomic across processes. Each call opens its own connection, which keeps the
store safe to use from the launcher's reader threads.

Layout::

    $TFDIST_HOME/jobs.db              jobs, tasks, state history; Optuna's study tables
    $TFDIST_HOME/jobs/<name>/         one directory per job (logs, outputs)

Both are private: a new home is created 0700 and the database 0600 (SQLite gives
its -wal and -shm files the database's mode), because a job record holds the
trainer's arguments, credentials included, and the logs hold whatever a task
printed. A home that other users can read is used as found, with a warning.

Tuning studies live in the same file: Optuna's RDB storage adds its own tables
(``studies``, ``trials``, ...) next to these, and a trial job points at its
tuning job through ``parent_job``.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit._owned import UnsafePathError, check_owned_dir, owned_dir
from toolkit.jobs.errors import BackendError, JobExistsError, JobNotFoundError, JobStateError
from toolkit.jobs.model.names import validate_job_name
from toolkit.jobs.storage._sql import _close_tasks, _drop_placeholder_trials, _immediate, _one_line, _record, _reserve
from toolkit.jobs.storage.records import JobRecord
from toolkit.jobs.storage.states import JobState, check_transition

__all__ = ["JobStore", "SupervisorInfo", "default_home"]

_log = logging.getLogger(__name__)
_warned: set[Path] = set()

# 2: the unused placeholder `trials` table gave its name to Optuna's (tasks.reason is added in place)
SCHEMA_VERSION = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY, backend TEXT NOT NULL, state TEXT NOT NULL, spec TEXT NOT NULL,
    job_dir TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, started_at REAL, ended_at REAL,
    error TEXT, exit_code INTEGER, warnings TEXT NOT NULL DEFAULT '[]', details TEXT NOT NULL DEFAULT '{}',
    supervisor_pid INTEGER, supervisor_start INTEGER, supervisor_host TEXT, heartbeat_at REAL,
    parent_job TEXT REFERENCES jobs(name), nonce TEXT);
CREATE TABLE IF NOT EXISTS tasks (
    job TEXT NOT NULL REFERENCES jobs(name), name TEXT NOT NULL, state TEXT NOT NULL,
    pid INTEGER, pid_start INTEGER, restarts INTEGER NOT NULL DEFAULT 0, exit_code INTEGER,
    log_path TEXT, updated_at REAL NOT NULL, reason TEXT, PRIMARY KEY (job, name));
CREATE TABLE IF NOT EXISTS history (
    job TEXT NOT NULL REFERENCES jobs(name), state TEXT NOT NULL, at REAL NOT NULL, message TEXT);
CREATE INDEX IF NOT EXISTS history_job ON history (job, at);
CREATE TABLE IF NOT EXISTS reservations (name TEXT PRIMARY KEY, owner TEXT NOT NULL REFERENCES jobs(name));
"""


def default_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$TFDIST_HOME``, or ``~/.tfdist``: the one place the store's location is read."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("TFDIST_HOME") or "~/.tfdist").expanduser()


@dataclass(frozen=True)
class SupervisorInfo:
    """Who runs a local job, so a later reader can tell whether it is still alive."""

    pid: int | None
    start_ticks: int | None
    host: str | None
    heartbeat_at: float | None
    nonce: str | None = None  # in the environment of the supervisor and of every task it starts


class JobStore:
    """The job database of one tfdist home."""

    def __init__(self, home: str | Path | None = None, *, timeout: float = 30.0) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.path = self.home / "jobs.db"
        self._timeout = timeout
        _private_home(self.home)
        with _one_line(self.path):
            _create_private(self.path)
            with contextlib.closing(self._open(readonly=True)) as conn:
                current = conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION and "nonce" in {
                    row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
            if current:  # a reader writes nothing (not even the WAL pragma): it works on a full disk
                return
            with contextlib.closing(self._open()) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                _drop_placeholder_trials(conn)
                conn.executescript(_SCHEMA)  # idempotent: every statement is IF NOT EXISTS
                if "reason" not in {row[1] for row in conn.execute("PRAGMA table_info(tasks)")}:
                    conn.execute("ALTER TABLE tasks ADD COLUMN reason TEXT")
                if "nonce" not in {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}:
                    conn.execute("ALTER TABLE jobs ADD COLUMN nonce TEXT")
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @property
    def url(self) -> str:
        """The database as an SQLAlchemy URL, for Optuna's storage."""
        return f"sqlite:///{self.path.resolve()}"

    def job_dir(self, name: str) -> Path:
        """The job's directory; the name is validated because it becomes a path."""
        name = validate_job_name(name)
        try:
            return owned_dir(self.home / "jobs", what="the jobs directory", parents=False) / name
        except UnsafePathError as exc:
            raise BackendError(str(exc)) from exc

    def _open(self, *, readonly: bool = False) -> sqlite3.Connection:
        """A connection; ``readonly`` ones (every reader's) cannot write the file, so a full disk or a
        read-only mount does not stop ``describe`` and ``list``."""
        target, uri = (f"file:{self.path}?mode=ro", True) if readonly else (str(self.path), False)
        conn = sqlite3.connect(target, timeout=self._timeout, isolation_level=None, uri=uri)
        conn.row_factory = sqlite3.Row
        if not readonly:
            conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _rows(self, query: str, *args: Any) -> list[sqlite3.Row]:
        with _one_line(self.path), contextlib.closing(self._open(readonly=True)) as conn:
            return conn.execute(query, args).fetchall()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with _one_line(self.path), contextlib.closing(self._open()) as conn, _immediate(conn):
            yield conn

    def create(self, name: str, *, backend: str, spec: Mapping[str, Any], warnings: tuple[str, ...] = (),
               details: Mapping[str, Any] | None = None, parent_job: str | None = None) -> JobRecord:
        """Inserts a QUEUED job; raises JobExistsError if the name is taken.

        ``details["reservedNames"]`` (a tuning job's trial names) are reserved for
        the job's children in the same transaction: the job is refused if one is
        already a job or reserved, and later only a child of this job
        (``parent_job``) can take one. So a study never meets a taken trial name
        halfway through.
        """
        job_dir = self.job_dir(name)
        now = time.time()
        kept = {k: v for k, v in (details or {}).items() if k != "reservedNames"}  # the table keeps those
        reserved = list((details or {}).get("reservedNames", ()))
        try:
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO jobs (name, backend, state, spec, job_dir, created_at, updated_at, "
                    "warnings, details, parent_job) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, backend, JobState.QUEUED.value, json.dumps(dict(spec)), str(job_dir), now, now,
                     json.dumps(list(warnings)), json.dumps(kept), parent_job))
                conn.execute("INSERT INTO history (job, state, at, message) VALUES (?, ?, ?, ?)",
                             (name, JobState.QUEUED.value, now, "submitted"))
                _reserve(conn, name, reserved, parent_job)
        except sqlite3.IntegrityError as exc:
            raise JobExistsError(f"a job named {name!r} already exists (state {self.get(name).state}); "
                                 "job names are unique. Pick another name.") from exc
        return self.get(name)

    def get(self, name: str) -> JobRecord:
        with _one_line(self.path), contextlib.closing(self._open(readonly=True)) as conn:
            row = conn.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise JobNotFoundError(f"no job named {name!r} in {self.path}. "
                                       "See the jobs with `toolkit.jobs.list_jobs()`.")
            tasks = conn.execute("SELECT * FROM tasks WHERE job = ? ORDER BY name", (name,)).fetchall()
            history = conn.execute("SELECT * FROM history WHERE job = ? ORDER BY at, rowid", (name,)).fetchall()
        return _record(row, tasks, history)

    def names(self, *, backend: str | None = None) -> list[str]:
        """Job names, newest first."""
        where, args = (" WHERE backend = ?", (backend,)) if backend is not None else ("", ())
        return [r["name"] for r in self._rows(f"SELECT name FROM jobs{where} ORDER BY created_at DESC", *args)]

    def transition(self, name: str, new: JobState | str, *, message: str | None = None,
                   error: str | None = None, exit_code: int | None = None) -> JobRecord:
        """Moves the job to ``new`` atomically; raises JobStateError if that is not allowed now."""
        with self._write() as conn:
            now = time.time()  # under the lock: transitions racing for it are recorded in the order they won it
            row = conn.execute("SELECT state FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise JobNotFoundError(f"no job named {name!r} in {self.path}.")
            new = check_transition(name, row["state"], new)
            sets = {"state": new.value, "updated_at": now}
            if new is JobState.RUNNING:
                sets["started_at"] = now
            if new.is_final:
                sets["ended_at"] = now
            if error is not None:
                sets["error"] = error
            if exit_code is not None:
                sets["exit_code"] = exit_code
            conn.execute(f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in sets)} WHERE name = ?",
                         (*sets.values(), name))
            if new.is_final:
                _close_tasks(conn, name, f"the job ended {new.value}: {error or message or 'no reason recorded'}", now)
            conn.execute("INSERT INTO history (job, state, at, message) VALUES (?, ?, ?, ?)",
                         (name, new.value, now, message or error))
        return self.get(name)

    def start_if_room(self, name: str, *, limit: int, message: str) -> bool | None:
        """QUEUED -> PREPARING if fewer than ``limit`` other top-level jobs of its backend are live past QUEUED;
        atomic across processes. True: started; False: no room yet; None: no longer QUEUED (a cancel)."""
        with self._write() as conn:
            row = conn.execute("SELECT state, backend FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None or row["state"] != JobState.QUEUED.value:
                return None
            busy = conn.execute("SELECT COUNT(*) FROM jobs WHERE parent_job IS NULL AND backend = ? AND name != ? "
                                "AND state IN ('PREPARING', 'RUNNING', 'CANCELLING')",
                                (row["backend"], name)).fetchone()[0]
            if busy >= limit:
                return False
            now = time.time()
            conn.execute("UPDATE jobs SET state = ?, updated_at = ? WHERE name = ?",
                         (JobState.PREPARING.value, now, name))
            conn.execute("INSERT INTO history (job, state, at, message) VALUES (?, ?, ?, ?)",
                         (name, JobState.PREPARING.value, now, message))
        return True

    def advance(self, name: str, new: JobState, **fields: Any) -> bool:
        """``transition``, or False when a cancel got there first (the job is CANCELLING)."""
        try:
            self.transition(name, new, **fields)
            return True
        except JobStateError:
            if self.get(name).state is JobState.CANCELLING:
                return False
            raise

    def set_supervisor(self, name: str, *, pid: int, start_ticks: int | None, host: str,
                       nonce: str | None = None) -> None:
        """Who runs the job; ``nonce`` (kept when None) is what its processes carry (``_procs.is_the_jobs``)."""
        with self._write() as conn:
            conn.execute("UPDATE jobs SET supervisor_pid = ?, supervisor_start = ?, supervisor_host = ?, "
                         "heartbeat_at = ?, nonce = COALESCE(?, nonce) WHERE name = ?",
                         (pid, start_ticks, host, time.time(), nonce, name))

    def heartbeat(self, name: str) -> None:
        with self._write() as conn:
            conn.execute("UPDATE jobs SET heartbeat_at = ? WHERE name = ?", (time.time(), name))

    def supervisor(self, name: str) -> SupervisorInfo:
        rows = self._rows("SELECT supervisor_pid, supervisor_start, supervisor_host, heartbeat_at, nonce "
                          "FROM jobs WHERE name = ?", name)
        if not rows:
            raise JobNotFoundError(f"no job named {name!r} in {self.path}.")
        return SupervisorInfo(*rows[0])

    def update_task(self, job: str, task: str, *, state: str, **fields: Any) -> None:
        """Creates or updates one task row; ``fields`` are pid, pid_start, restarts, exit_code, log_path and
        reason (how it ended, when not by exiting 0)."""
        allowed = {"pid", "pid_start", "restarts", "exit_code", "log_path", "reason"}
        unknown = set(fields) - allowed
        if unknown:
            raise TypeError(f"update_task got unknown fields {sorted(unknown)}; valid: {sorted(allowed)}")
        values = {"state": state, "updated_at": time.time(), **fields}
        with self._write() as conn:
            conn.execute("INSERT OR IGNORE INTO tasks (job, name, state, updated_at) VALUES (?, ?, ?, ?)",
                         (job, task, state, values["updated_at"]))
            conn.execute(f"UPDATE tasks SET {', '.join(f'{k} = ?' for k in values)} WHERE job = ? AND name = ?",
                         (*values.values(), job, task))

    def update_details(self, name: str, **fields: Any) -> None:
        """Sets top-level keys of the job's ``details`` (a tuning job's trial summary, for one)."""
        with self._write() as conn:
            row = conn.execute("SELECT details FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise JobNotFoundError(f"no job named {name!r} in {self.path}.")
            details = {**json.loads(row["details"]), **fields}
            conn.execute("UPDATE jobs SET details = ?, updated_at = ? WHERE name = ?",
                         (json.dumps(details), time.time(), name))

    def children(self, parent: str) -> list[str]:
        """The jobs started on behalf of ``parent`` (a tuning job's trials), oldest first."""
        return [r["name"] for r in self._rows("SELECT name FROM jobs WHERE parent_job = ? ORDER BY created_at, name",
                                              parent)]

    def records(self) -> list[JobRecord]:
        """Every job, newest first, read in one transaction: three queries, not three per job.

        For readers that show many jobs at once (``tfdist ui``'s job list); ``get`` reads one.
        """
        with _one_line(self.path), contextlib.closing(self._open(readonly=True)) as conn:
            conn.execute("BEGIN")  # one snapshot of the three tables (WAL: writers go on meanwhile)
            try:
                rows = conn.execute("SELECT * FROM jobs ORDER BY created_at DESC").fetchall()
                tasks = conn.execute("SELECT * FROM tasks ORDER BY job, name").fetchall()
                history = conn.execute("SELECT * FROM history ORDER BY job, at, rowid").fetchall()
            finally:
                conn.execute("COMMIT")
        by_job: dict[str, tuple[list[sqlite3.Row], list[sqlite3.Row]]] = {r["name"]: ([], []) for r in rows}
        for t in tasks:
            if t["job"] in by_job:
                by_job[t["job"]][0].append(t)
        for h in history:
            if h["job"] in by_job:
                by_job[h["job"]][1].append(h)
        return [_record(r, *by_job[r["name"]]) for r in rows]

    def task_processes(self, job: str) -> list[tuple[str, int, int | None]]:
        """``(task, pid, start_ticks)`` of every task that ever had a process."""
        rows = self._rows("SELECT name, pid, pid_start FROM tasks WHERE job = ? AND pid IS NOT NULL", job)
        return [(r["name"], r["pid"], r["pid_start"]) for r in rows]


def _private_home(home: Path) -> None:
    """Creates ``home`` 0700; warns (once per process) when an existing one is open to other users."""
    if not home.exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        old = os.umask(0o077)
        try:
            home.mkdir(mode=0o700, exist_ok=True)
        finally:
            os.umask(old)
        return
    try:  # another user's home (or one others can write) holds their jobs.db, their job dirs, their code
        check_owned_dir(home, what="the tfdist home", fix=f"use a home of your own: export TFDIST_HOME=~/.tfdist "
                        f"(or chown/chmod go-w {home} if it is yours)")
    except UnsafePathError as exc:
        raise BackendError(str(exc)) from exc
    mode = stat.S_IMODE(home.stat().st_mode)
    if mode & 0o077 and home not in _warned:
        _warned.add(home)
        _log.warning("the tfdist home %s is readable by other users (mode %04o): they can read every job's "
                     "spec, arguments and logs. Make it private with: chmod 700 %s", home, mode, home)


def _create_private(path: Path) -> None:
    """Creates the database file 0600 before SQLite would create it with the umask's mode.

    Only ever a new file (O_EXCL): closing a descriptor of a file this process
    already has open in SQLite would drop that connection's POSIX locks.
    """
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
