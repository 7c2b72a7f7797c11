"""``stream-logs`` for local jobs: tail -f over the per-task log files.

The launcher writes one file per task under ``<job dir>/logs/``. Following them
from the files (not from the supervisor's pipes) means any number of readers,
started at any time, see the whole output; the stream ends once the job is in
a final state and every file has been read to its end. Files are read a MiB at
a time and a line is cut at ``toolkit.launcher._lines.MAX_LINE`` bytes (the
file keeps it whole); a log that is not a regular file of this user is skipped.
A log the launcher rotated (``log_backups``: ``<task>.log`` renamed ``.log.1``
and begun anew) is followed across: the rest of the file being read is read
from its new name first, then any newer rotated file, then the new log.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from toolkit._owned import UnsafePathError, open_regular
from toolkit.jobs.storage.records import JobRecord
from toolkit.launcher._lines import LineCutter
from toolkit.launcher._rotate import rotated_files

_READ = 1 << 20
_HEAD = 64  # bytes of a log file's start that, with its inode, tell it from another


class LogFollower:
    """Reads new complete lines from ``<task>.log`` files and prefixes them ``[task]``."""

    def __init__(self, log_dir: Path, tasks: list[str] | None, sink: Callable[[str], None], *,
                 rename: Callable[[str], str] = str) -> None:
        self.log_dir = log_dir
        self.tasks = tasks
        self.sink = sink
        self.rename = rename  # log file stem -> task name shown (the launcher's chief-0 is a job's master-0)
        self._offsets: dict[str, int] = {}
        # the file each offset is in, as (inode, its first bytes): a rotation gives the log a new file, and an
        # inode freed by a rotated-out file is soon another's
        self._files_read: dict[str, tuple[int, bytes]] = {}
        self._partial: dict[str, LineCutter] = {}  # each file's line in progress, cut at MAX_LINE bytes

    def _files(self) -> list[Path]:
        if not self.log_dir.is_dir():
            return []
        files = sorted(self.log_dir.glob("*.log"))
        return [f for f in files if self.tasks is None or self.rename(f.stem) in self.tasks]

    def poll(self, *, final: bool = False) -> int:
        """Emits every new line; with ``final`` also an unterminated last line. Returns lines emitted."""
        count = 0
        for path in self._files():
            task = self.rename(path.stem)
            count += self._rotated_away(task, path)
            try:
                fh = open_regular(path)
            except (FileNotFoundError, UnsafePathError):
                continue
            with fh:
                seen = (os.fstat(fh.fileno()).st_ino, os.pread(fh.fileno(), _HEAD, 0))
                known = self._files_read.get(task)
                if known is not None and not _same(known, seen):  # replaced under us: the new file from its start
                    self._offsets[task] = 0
                self._files_read[task] = seen
                count += self._read(task, fh, self._offsets.get(task, 0))
            if final:
                count += self._emit(task, b"", final=True)
        return count

    def _read(self, task: str, fh: BinaryIO, offset: int) -> int:
        """Emits the lines of ``fh`` from ``offset`` on, a MiB at a time (a 64 MiB line must not become 64 MiB
        of memory at once)."""
        count = 0
        fh.seek(offset)
        while chunk := fh.read(_READ):
            self._offsets[task] = fh.tell()
            count += self._emit(task, chunk)
            if len(chunk) < _READ:
                break
        return count

    def _rotated_away(self, task: str, path: Path) -> int:
        """After a rotation: the rest of the file being read (now ``.log.<k>``) and the newer rotated files
        (all that are kept, when the file being read has been rotated out already)."""
        known = self._files_read.get(task)
        if known is None or _same(known, _identity(path)):
            return 0
        older = rotated_files(path)
        found = [index for index, rotated in enumerate(older) if _same(known, _identity(rotated))]
        # rotated out of the kept files already: every kept one is newer (what was between is gone)
        first = found[0] if found else len(older) - 1
        count = 0
        for index in range(first, -1, -1):
            offset = self._offsets.get(task, 0) if found and index == first else 0
            try:
                with open_regular(older[index]) as fh:
                    count += self._read(task, fh, offset)
            except (FileNotFoundError, UnsafePathError):
                continue
        self._files_read.pop(task)
        self._offsets[task] = 0
        return count

    def _emit(self, task: str, chunk: bytes, *, final: bool = False) -> int:
        cutter = self._partial.setdefault(task, LineCutter())
        lines = cutter.feed(chunk) + (cutter.close() if final else [])
        for line in lines:
            self.sink(_prefixed(task, line))
        return len(lines)


def _identity(path: Path) -> tuple[int, bytes] | None:
    """``path``'s inode and first ``_HEAD`` bytes, or None."""
    try:
        with open_regular(path) as fh:
            return os.fstat(fh.fileno()).st_ino, fh.read(_HEAD)
    except (OSError, UnsafePathError):
        return None


def _same(known: tuple[int, bytes], seen: tuple[int, bytes] | None) -> bool:
    """Whether ``seen`` is the file read as ``known`` (same inode, and it begins as it began; it may have grown)."""
    return seen is not None and seen[0] == known[0] and seen[1].startswith(known[1])


def _prefixed(task: str, line: str) -> str:
    prefix = f"[{task}] "
    return line if line.startswith(prefix) else prefix + line


def follow(describe: Callable[[], JobRecord], log_dir: Path, *, tasks: list[str] | None,
           sink: Callable[[str], None], follow: bool = True, poll_interval: float = 0.5,
           rename: Callable[[str], str] = str) -> JobRecord:
    """Streams the logs until ``describe()`` reports a final state (or at once without ``follow``)."""
    reader = LogFollower(log_dir, tasks, sink, rename=rename)
    while True:
        record = describe()
        if record.is_final or not follow:
            reader.poll(final=True)
            return record
        if not reader.poll():
            time.sleep(poll_interval)
