"""A job's log files for the dashboard: which exist, a chunk of one, and a live stream of it.

The names a request may ask for are the ones listed here, from the job's own
directory in the store; a request never contributes a path. A file that
resolves outside the job's directory (a symlink a trainer left there) is not
listed.

The stream is Server-Sent Events: each message's ``id`` is the byte offset
after it, so a browser that lost its connection reconnects (EventSource does
that by itself) with ``Last-Event-ID`` and continues where it stopped, with no
line lost or shown twice.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.jobs.storage.records import JobRecord

__all__ = ["Chunk", "log_files", "read_chunk", "stream"]

MAX_CHUNK = 256 * 1024  # bytes per answer: a 1 GB log is paged, never read whole


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def log_files(record: JobRecord, job_dir: Path) -> dict[str, Path]:
    """``{name: path}``: each task's log (named as ``describe`` names the task), ``study``, ``supervisor``."""
    primary = str((record.details.get("plan") or {}).get("primary") or "chief")
    found: dict[str, Path] = {}
    logs = job_dir / "logs"
    if logs.is_dir():
        for path in sorted(logs.glob("*.log")):
            kind, _, index = path.stem.rpartition("-")
            name = f"{primary}-{index}" if kind == "chief" else path.stem  # the launcher's chief-0 is master-0
            found[name] = path
    for task in record.tasks:
        if task.log_path and task.name not in found:
            found[task.name] = Path(task.log_path)
    if (job_dir / "supervisor.log").is_file():
        found["supervisor"] = job_dir / "supervisor.log"
    return {name: path for name, path in found.items() if path.is_file() and _inside(path, job_dir)}


@dataclass(frozen=True)
class Chunk:
    lines: list[str]
    offset: int         # where the next read starts
    start: int          # where this chunk started (after a skipped partial line, when tailing)
    size: int           # the file's size when read


def read_chunk(path: Path, offset: int, *, final: bool = False, limit: int = MAX_CHUNK) -> Chunk:
    """Complete lines from ``offset`` (a negative offset: the last ``limit`` bytes); with ``final`` the
    unterminated last line too. Bytes that are not UTF-8 are replaced, never dropped."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        if offset < 0:
            offset = max(0, size - limit)
            if offset:
                fh.seek(offset - 1)
                offset += len(fh.readline()) - 1  # start at a line's beginning
        if offset > size:  # the log was rotated (``<task>.log.1``) and begun anew: read the new one from its start
            offset = 0
        fh.seek(offset)
        data = fh.read(limit)
    end = len(data) if final and offset + len(data) >= size else data.rfind(b"\n") + 1
    if end == 0 and len(data) == limit:  # one line longer than a chunk: cut it
        end = len(data)
    text = data[:end].decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return Chunk([line.rstrip("\r") for line in lines], offset + end, offset, size)


def stream(path: Callable[[], Path | None], offset: int, is_final: Callable[[], bool], *,
           stopping: threading.Event, interval: float = 0.25, ping: float = 10.0) -> Iterator[bytes]:
    """SSE messages: ``lines`` events as the file grows, ``end`` once the job ended and all is read.

    ``path()`` is asked again on each look (a task's log appears when it starts);
    a comment every ``ping`` seconds lets the server notice a reader that left.
    """
    yield b"retry: 1000\n\n"
    last = time.monotonic()
    while not stopping.is_set():
        final = is_final()  # before reading: a line written just before the end is still read
        current = path()
        chunk = read_chunk(current, offset, final=final) if current is not None and current.is_file() else None
        if chunk is not None and (chunk.lines or chunk.offset != offset):
            offset = chunk.offset
            body = json.dumps({"lines": chunk.lines, "offset": chunk.offset, "start": chunk.start})
            yield f"id: {offset}\nevent: lines\ndata: {body}\n\n".encode()
            last = time.monotonic()
            continue
        if final:
            yield b"event: end\ndata: {}\n\n"
            return
        if time.monotonic() - last > ping:
            yield b": ping\n\n"
            last = time.monotonic()
        stopping.wait(interval)
