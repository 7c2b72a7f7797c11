"""Waiting in tests: poll a predicate with a deadline, never a fixed sleep; find a cluster's processes."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float, what: str, every: float = 0.3) -> T:
    """Returns ``predicate()``'s first truthy value; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def processes_with(entry: str) -> list[int]:
    """Live (not zombie) processes whose environment holds ``entry`` (e.g. ``RAY_TMPDIR=/...``) exactly."""
    wanted, found = entry.encode(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if wanted in fh.read().split(b"\0"):
                    with open(f"/proc/{pid}/stat", "rb") as stat:
                        if stat.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                            found.append(int(pid))
        except OSError:
            continue
    return found
