"""A job's end kept beside its logs when the store cannot take it: a full disk under ``$TFDIST_HOME``.

The supervisor knows how its job ended, but on a full disk SQLite cannot write
that down (``database or disk is full``); without this record the job would
stay RUNNING until the supervisor gave up and a later reader reaped it as
"supervisor died", which is not how it ended. So:

- At its start the supervisor **reserves** ``<record folder>/end.json``:
  ``RESERVED`` bytes of spaces, written and synced while there is room, so
  writing the end later overwrites blocks the file already has and needs no
  free space (on ext4, XFS and tmpfs; a copy-on-write filesystem may still
  refuse it, and then nothing better exists).
- When the store refuses the end, the supervisor writes it there (``write_end``)
  and keeps retrying the store (``Supervisor``); once the store takes it the
  file is blanked.
- Every reader merges the file (``merged``): a job the store still shows live
  is shown with the recorded end and why the store does not have it, and the
  reaper of a dead supervisor records that end instead of "supervisor died".
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

from toolkit._owned import UnsafePathError, read_regular
from toolkit.jobs.storage.records import JobRecord, StateChange
from toolkit.jobs.storage.states import JobState

__all__ = ["END_FILE", "RESERVED", "blank", "merged", "read_end", "reserve", "write_end"]

_log = logging.getLogger(__name__)
END_FILE = "end.json"
RESERVED = 4096  # bytes: one block; the message is cut to fit
_MESSAGE = 1500  # characters of each text field kept


def reserve(record_dir: Path) -> None:
    """Creates (or keeps) ``end.json``, ``RESERVED`` bytes of spaces on disk, private, never through a link."""
    fd = os.open(record_dir / END_FILE, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise UnsafePathError(f"refusing to write {record_dir / END_FILE}: not a regular file of yours. "
                                  "Fix: remove it.", path=record_dir / END_FILE)
        os.pwrite(fd, b" " * RESERVED, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _overwrite(record_dir: Path, data: bytes) -> None:
    """Writes ``data`` over the reserved bytes in place (no truncation, no new block)."""
    fd = os.open(record_dir / END_FILE, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise UnsafePathError(f"refusing to write {record_dir / END_FILE}: not a regular file of yours",
                                  path=record_dir / END_FILE)
        os.pwrite(fd, data.ljust(RESERVED, b" "), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_end(record_dir: Path, state: JobState, *, why: str, message: str | None = None,
              error: str | None = None, exit_code: int | None = None) -> bool:
    """Records the job's end in ``end.json``; False (logged) if even that cannot be written."""
    def cut(text: str | None) -> str | None:
        return None if text is None else text[:_MESSAGE]

    doc = {"state": state.value, "at": time.time(), "message": cut(message), "error": cut(error),
           "exitCode": exit_code, "why": cut(why)}
    data = json.dumps(doc).encode()
    if len(data) > RESERVED:  # escaped characters can grow the text: keep what fits
        doc["error"] = doc["message"] = None
        data = json.dumps(doc).encode()
    try:
        _overwrite(record_dir, data)
    except (OSError, UnsafePathError) as exc:
        _log.error("could not keep the job's end (%s) in %s either: %s", state.value, record_dir / END_FILE, exc)
        return False
    return True


def blank(record_dir: Path) -> None:
    """Empties the reserved record again (the store has the end now)."""
    with contextlib.suppress(FileNotFoundError):  # a job from before the record: nothing to blank
        try:
            _overwrite(record_dir, b"")
        except (OSError, UnsafePathError) as exc:
            _log.warning("could not blank %s: %s (readers prefer the store's end)", record_dir / END_FILE, exc)


def read_end(record_dir: Path) -> dict[str, Any] | None:
    """The end kept in ``end.json``, or None (no file, a blank one, or one not to be trusted)."""
    try:
        text = read_regular(record_dir / END_FILE, limit=RESERVED).strip()
    except (OSError, UnsafePathError):
        return None
    if not text:
        return None
    try:
        doc = json.loads(text)
        state = JobState(doc["state"])
    except (ValueError, KeyError, TypeError):
        _log.warning("ignored %s: not an end record", record_dir / END_FILE)
        return None
    if not state.is_final or not isinstance(doc.get("at"), (int, float)):
        return None
    return {**doc, "state": state}


def note(end: dict[str, Any]) -> str:
    """Why the job's end comes from ``end.json``, for ``describe`` and the history."""
    return (f"ended {end['state'].value} (kept in {END_FILE}: the job store could not be written: "
            f"{end.get('why') or 'no reason recorded'})")


def merged(record: JobRecord) -> JobRecord:
    """``record`` with the end kept in its record folder, when the store still shows it live."""
    if record.is_final or record.record_dir is None:
        return record
    end = read_end(Path(record.record_dir))
    if end is None:
        return record
    text = note(end)
    return dataclasses.replace(
        record, state=end["state"], ended_at=end["at"], exit_code=end.get("exitCode"),
        error=end.get("error") if end.get("error") is not None else record.error,
        warnings=(*record.warnings, f"store: the job {text}"),
        history=(*record.history, StateChange(end["state"], end["at"], end.get("message") or end.get("error") or text)))
