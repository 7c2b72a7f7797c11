""""Why is it stuck?": each running task's Python stacks, and how long each task has been quiet.

Stacks come from py-spy (``py-spy dump --pid``), the tool Ray's dashboard uses
for the same question. It reads the process's memory from outside, so it
needs nothing from the task: it works on a task blocked in a C++ op or a gRPC
wait, on a task started before the dashboard, and on any Python trainer. It
needs ptrace permission on the task (same user, and a container that allows
``ptrace``); when that is refused the answer says so for that task.

A task is only dumped while the store says it runs and its pid still belongs
to the process the store recorded (pid and start time), so a reused pid is
never looked at. Tasks on another machine (Ray, Slurm) are named, not dumped.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from toolkit.jobs.engines.local._procs import is_alive
from toolkit.jobs.reader import split_task
from toolkit.jobs.storage.records import JobRecord, iso_time
from toolkit.jobs.storage.store import JobStore

__all__ = ["STALL_AFTER", "py_spy", "progress", "stacks"]

STALL_AFTER = 60.0  # seconds without a log line (or, for the chief, a summary step) before a task looks stuck
_TIMEOUT = 15.0


def py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this Python (a venv's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _dump(tool: str, pid: int) -> dict[str, Any]:
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"py-spy did not answer within {_TIMEOUT:g} s"}
    if done.returncode != 0:
        first = (done.stderr or done.stdout).strip().splitlines()[:1]
        why = first[0] if first else f"exit code {done.returncode}"
        if "ermission" in why:
            why += " (py-spy needs ptrace rights on the task: same user, and SYS_PTRACE in a container)"
        return {"error": f"py-spy could not read pid {pid}: {why}"}
    return {"stack": done.stdout}


def stacks(store: JobStore, record: JobRecord) -> list[dict[str, Any]]:
    """One entry per task: its stack (``stack``) or why there is none (``error``)."""
    tool = py_spy()
    processes = {name: (pid, ticks) for name, pid, ticks in store.task_processes(record.name)}
    nodes = record.details.get("nodes") or {}
    todo: list[tuple[dict[str, Any], int]] = []
    out = []
    for task in record.tasks:
        entry: dict[str, Any] = {"task": task.name, "state": task.state, "pid": task.pid}
        out.append(entry)
        pid, ticks = processes.get(task.name, (None, None))
        if task.state != "RUNNING":
            entry["error"] = f"the task is {task.state}, not running"
        elif pid is None:
            where = (nodes.get(task.name) or {}).get("address") or "another machine"
            entry["error"] = f"the task runs on {where}; its stack can only be read there (py-spy dump)"
        elif not is_alive(pid, ticks):
            entry["error"] = f"pid {pid} is gone (or now belongs to another process)"
        elif tool is None:
            entry["error"] = "py-spy is not installed; install it with: pip install 'tfdist[ui]'"
        else:
            todo.append((entry, pid))
    if todo and tool is not None:
        with ThreadPoolExecutor(max_workers=min(4, len(todo))) as pool:
            for (entry, _), result in zip(todo, pool.map(lambda item: _dump(tool, item[1]), todo), strict=True):
                entry.update(result)
    return out


def progress(record: JobRecord, logs: dict[str, Path], chief_step: tuple[int, float] | None,
             *, now: float | None = None) -> list[dict[str, Any]]:
    """Each task's last sign of progress: its log's last write and, for the chief, its last summary step."""
    now = time.time() if now is None else now
    rows = []
    for task in record.tasks:
        path = logs.get(task.name)
        last = path.stat().st_mtime if path is not None and path.is_file() else None
        row: dict[str, Any] = {"task": task.name, "state": task.state, "lastOutput": iso_time(last)}
        role, _ = split_task(task.name)
        if chief_step is not None and role in ("chief", "master"):
            row["lastStep"], step_time = chief_step
            row["lastStepTime"] = iso_time(step_time)
            last = max(last or 0.0, step_time)
        quiet = None if last is None else round(now - last, 1)
        row["quietSeconds"] = quiet
        row["stalled"] = task.state == "RUNNING" and (quiet is None or quiet > STALL_AFTER)
        rows.append(row)
    return rows
