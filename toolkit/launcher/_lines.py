"""A task's output read in bounded chunks: lines cut at a length, a log file that may fill its disk.

A task can print one 64 MiB line without a newline, or write until the disk
under the log is full. Neither may grow the launcher's memory or stop it
reading: a stopped reader fills the pipe, and the task blocks on its next
print forever. So output is read ``CHUNK`` bytes at a time, every byte goes to
the log file as it comes (up to an optional size cap), and a line shown on the
console or kept for the failure message is cut at ``MAX_LINE`` bytes with a
note of how much was cut. A write that fails (``ENOSPC``, ``EDQUOT``) is
recorded once, and the pipe is still drained.
"""
from __future__ import annotations

import logging
import os

__all__ = ["CHUNK", "MAX_LINE", "LineCutter", "LogSink"]

logger = logging.getLogger(__name__)

CHUNK = 64 * 1024
MAX_LINE = 8 * 1024  # bytes of one line shown or kept; the log file keeps the whole line


class LineCutter:
    """Splits a byte stream into lines of at most ``limit`` bytes (the rest counted, not kept)."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.cut = 0

    def feed(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes."""
        lines = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = self.limit - len(self.buf)
            self.buf += piece[:max(room, 0)]
            self.cut += max(len(piece) - max(room, 0), 0)
            if end < 0:
                break
            lines.append(self._line())
            start = end + 1
        return lines

    def close(self) -> list[str]:
        """The last line, if the stream ended without a newline."""
        return [self._line()] if self.buf or self.cut else []

    def _line(self) -> str:
        text = bytes(self.buf).decode("utf-8", errors="replace").rstrip("\r")
        if self.cut:
            text += f" [... {self.cut:,} more bytes of this line cut; the log file has them]"
        self.buf.clear()
        self.cut = 0
        return text


class LogSink:
    """A task's log file: writes that fail (a full disk) or pass ``max_bytes`` are counted, never raised."""

    def __init__(self, fd: int, *, name: str, max_bytes: int | None = None) -> None:
        self.fd, self.name = fd, name
        self.max_bytes = max_bytes
        self.written = 0
        self.error: str | None = None  # the first write error, e.g. "No space left on device"
        self.dropped = 0

    def write(self, chunk: bytes) -> None:
        if self.max_bytes is not None and self.written + len(chunk) > self.max_bytes:
            keep = max(self.max_bytes - self.written, 0)
            if keep and not self.dropped:
                self._write(chunk[:keep])
            if not self.dropped:
                self._write(f"\n[tfdist: the log reached its cap of {self.max_bytes:,} bytes; the rest of this "
                            "run's output is not kept]\n".encode())
            self.dropped += len(chunk) - keep
            return
        self._write(chunk)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                done = os.write(self.fd, view)
                self.written += done
                view = view[done:]
        except OSError as exc:
            self.dropped += len(view)
            if self.error is None:
                self.error = exc.strerror or str(exc)
                logger.error("could not write the log %s: %s; the task's output is still read (and lost)",
                             self.name, self.error)

    def problem(self) -> str | None:
        """What the log file does not have, if anything (the task's result says it)."""
        if self.error is not None:
            return f"its log lost {self.dropped:,} bytes: {self.error}"
        if self.dropped:
            return f"its log reached its cap of {self.max_bytes:,} bytes; {self.dropped:,} bytes were not kept"
        return None

    def close(self) -> None:
        os.close(self.fd)
