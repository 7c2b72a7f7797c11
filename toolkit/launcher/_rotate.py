"""A task's log that rotates, as logrotate's ``rotate N`` and ``RotatingFileHandler`` keep ``.1``, ``.2``.

With ``max_log_bytes`` alone a run's log stops at the cap and the rest of the
output is lost: the *first* bytes are kept, which is the wrong end for a job
that runs for days. With ``log_backups`` N as well, a log that reaches the cap
is renamed ``<task>.log.1`` (``.1`` to ``.2``, and so on; ``.N`` is dropped) and
a new ``<task>.log`` begins, so the newest ``max_log_bytes * (N + 1)`` bytes are
always on disk. A rotation falls between lines where it can (a line longer
than the cap is cut across files).

Readers follow a rotation: ``stream-logs`` (``toolkit.jobs.logs``) notices that
``<task>.log`` is a new file and first reads the rest of the one it was reading
(now ``.1``, or further down), so no line is lost or shown twice;
``rotated_files`` lists a log's older files, newest first.

Renames happen inside the job's own ``logs/`` directory (checked as the
user's, ``toolkit._owned``), and the new file is opened ``O_NOFOLLOW``: a
symlink planted at a rotated name is replaced, never written through.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from toolkit._owned import open_append
from toolkit.launcher._lines import LogSink

__all__ = ["RotatingLogSink", "clear_rotated", "open_log", "rotated_files", "rotated_name"]


def open_log(path: Path, *, max_bytes: int | None, backups: int) -> LogSink:
    """A run's log: rotated at ``max_bytes`` with ``backups`` older files, else capped there (or whole)."""
    if max_bytes is not None and backups > 0:
        return RotatingLogSink(path, max_bytes=max_bytes, backups=backups)
    return LogSink(open_append(path), name=str(path), max_bytes=max_bytes)


def rotated_name(path: Path, index: int) -> Path:
    """``worker-0.log`` -> ``worker-0.log.<index>``."""
    return path.with_name(f"{path.name}.{index}")


def rotated_files(path: Path) -> list[Path]:
    """``path``'s rotated files that exist, newest (``.1``) first."""
    found = []
    index = 1
    while os.path.lexists(rotated := rotated_name(path, index)):
        found.append(rotated)
        index += 1
    return found


def clear_rotated(path: Path) -> None:
    """Removes rotated files an earlier run in the same job directory left (a new job starts its logs empty)."""
    for rotated in path.parent.glob(f"{path.name}.*"):
        if rotated.name[len(path.name) + 1:].isdigit():
            with contextlib.suppress(FileNotFoundError):
                rotated.unlink()


class RotatingLogSink(LogSink):
    """``LogSink`` over ``path`` that rotates it at ``max_bytes``, keeping ``backups`` older files."""

    def __init__(self, path: Path, *, max_bytes: int, backups: int) -> None:
        fd = open_append(path)
        super().__init__(fd, name=str(path), max_bytes=None)
        self.path, self.limit, self.backups = path, max(max_bytes, 1), backups
        self.size = os.fstat(fd).st_size  # a restarted task goes on in the same file
        self.rotations = 0  # in this run; beyond ``backups`` the oldest output is gone

    def write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            room = self.limit - self.size
            if room <= 0:
                self._rotate()
                continue
            piece = view[:room]
            if len(view) > room:
                newline = bytes(piece).rfind(b"\n")
                if newline >= 0:
                    piece = piece[:newline + 1]
                elif self.size:  # the line does not fit: it starts the next file
                    self._rotate()
                    continue
            self._write(bytes(piece))
            self.size += len(piece)
            view = view[len(piece):]

    def _rotate(self) -> None:
        os.close(self.fd)
        self.fd = -1
        try:
            for index in range(self.backups - 1, 0, -1):
                older = rotated_name(self.path, index)
                if os.path.lexists(older):
                    os.replace(older, rotated_name(self.path, index + 1))
            if self.backups:
                os.replace(self.path, rotated_name(self.path, 1))
            self.fd = open_append(self.path, truncate=True)
        except OSError as exc:  # a full disk can refuse the new file: the output is still read, and counted
            if self.error is None:
                self.error = f"rotating the log failed: {exc.strerror or exc}"
            self.fd = os.open(os.devnull, os.O_WRONLY)
        self.size = 0
        self.rotations += 1

    def problem(self) -> str | None:
        """What the log files do not have, if anything: output rotated away, or lost to a failed write."""
        if self.error is not None:
            return f"its log lost {self.dropped:,} bytes: {self.error}"
        if self.rotations > self.backups:
            return (f"its log was rotated {self.rotations} times at {self.limit:,} bytes; the {self.backups} newest "
                    "older files are kept, so its earliest output is gone")
        return None
