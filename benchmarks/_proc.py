"""What the benchmarks read from ``/proc``: a process tree, CPU times and the tfdist task a process is."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script from a checkout

from toolkit.launcher import ENV_TASK_NAME  # noqa: E402

__all__ = ["PolledRun", "cpu_seconds", "descendants", "task_name"]

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (field 3 onwards), or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children...), as ``/proc`` lists them now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and len(fields) > 1 and fields[1].isdigit():
                parents[int(entry)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, ppid in parents.items() if ppid == pid]
        found.extend(children)
        frontier.extend(children)
    return found


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far, or None if it is gone."""
    fields = _stat_fields(pid)
    if not fields or len(fields) < 13:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


_TASK = re.compile(r"(chief|master|worker|ps|evaluator)-\d+")


def task_name(pid: int) -> str | None:
    """The task name the launcher gave the process (``chief-0``...), or None.

    A task started as a fresh interpreter has it in its environment; a task forked from a preload
    process (``--preload``) has the environment it was forked with, and the name as its process name;
    the preload process itself is named ``preload``.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
        with open(f"/proc/{pid}/comm", "rb") as fh:
            comm = fh.read().strip().decode(errors="replace")
    except OSError:
        return None
    name = env.get(ENV_TASK_NAME.encode())
    if name:
        return name.decode()
    if comm == "tfdist-preload":
        return "preload"  # the process the tasks were forked from: its pages are theirs too
    return comm if _TASK.fullmatch(comm) else None


class PolledRun:
    """Runs ``cmd`` and samples the named processes below it while it runs.

    ``samples()`` yields ``{pid: name}`` every ``interval`` seconds for the
    processes ``name_of`` names; a process it cannot name yet (just forked,
    not yet exec'd) is asked again at the next sample. Afterwards ``output``
    holds the command's merged stdout and stderr lines and ``returncode`` its
    exit code.
    """

    def __init__(self, cmd: list[str], *, env: dict[str, str], interval: float,
                 name_of: Callable[[int], str | None] = task_name) -> None:
        self.cmd, self.interval, self.name_of = cmd, interval, name_of
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.output: list[str] = []
        self._reader = threading.Thread(target=lambda: self.output.extend(self.proc.stdout or ()), daemon=True)
        self._reader.start()

    def samples(self) -> Iterator[dict[int, str]]:
        names: dict[int, str] = {}
        while self.proc.poll() is None:
            sample: dict[int, str] = {}
            for pid in descendants(self.proc.pid):
                if pid not in names:
                    name = self.name_of(pid)
                    if name is None:
                        continue
                    names[pid] = name
                sample[pid] = names[pid]
            yield sample
            time.sleep(self.interval)
        self._reader.join(10)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode
