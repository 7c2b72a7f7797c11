"""``stream-logs`` for local jobs: tail -f over the per-task log files.

The launcher writes one file per task under ``<job dir>/logs/``. Following them
from the files (not from the supervisor's pipes) means any number of readers,
started at any time, see the whole output; the stream ends once the job is in
a final state and every file has been read to its end. Files are read a MiB at
a time and a line is cut at ``toolkit.launcher._lines.MAX_LINE`` bytes (the
file keeps it whole); a log that is not a regular file of this user is skipped.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from toolkit._owned import UnsafePathError, open_regular
from toolkit.jobs.storage.records import JobRecord
from toolkit.launcher._lines import LineCutter

_READ = 1 << 20


class LogFollower:
    """Reads new complete lines from ``<task>.log`` files and prefixes them ``[task]``."""

    def __init__(self, log_dir: Path, tasks: list[str] | None, sink: Callable[[str], None], *,
                 rename: Callable[[str], str] = str) -> None:
        self.log_dir = log_dir
        self.tasks = tasks
        self.sink = sink
        self.rename = rename  # log file stem -> task name shown (the launcher's chief-0 is a job's master-0)
        self._offsets: dict[str, int] = {}
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
            try:
                fh = open_regular(path)
            except (FileNotFoundError, UnsafePathError):
                continue
            with fh:  # a bounded read per poll: a 64 MiB line must not become 64 MiB of memory at once
                fh.seek(self._offsets.get(task, 0))
                while chunk := fh.read(_READ):
                    self._offsets[task] = fh.tell()
                    count += self._emit(task, chunk)
                    if len(chunk) < _READ:
                        break
            if final:
                count += self._emit(task, b"", final=True)
        return count

    def _emit(self, task: str, chunk: bytes, *, final: bool = False) -> int:
        cutter = self._partial.setdefault(task, LineCutter())
        lines = cutter.feed(chunk) + (cutter.close() if final else [])
        for line in lines:
            self.sink(_prefixed(task, line))
        return len(lines)


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
