"""What the benchmarks read from ``/proc``: a process tree and the tfdist task a process is."""
from __future__ import annotations

import os

__all__ = ["descendants", "task_name"]


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children...), as ``/proc`` lists them now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, ppid in parents.items() if ppid == pid]
        found.extend(children)
        frontier.extend(children)
    return found


def task_name(pid: int) -> str | None:
    """The ``TFDIST_TASK_NAME`` the launcher gave the process (``chief-0``...), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    name = env.get(b"TFDIST_TASK_NAME")
    return name.decode() if name else None
