"""Runs a LocalPlan's tasks through ``toolkit.launcher.launch`` and reports them to the store.

The launcher starts every task as a child of this process, in its own session,
with ``TFDIST_TASK_NAME`` in its environment. A watcher thread finds those
children in ``/proc`` once a second and records each task's pid (with its
start time, so a later reaper never kills a reused pid), its restarts and
whether it is still running. When the launcher returns, its results give
every task's exit code.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, TextIO

import toolkit
from toolkit.jobs._local_plan import LocalPlan
from toolkit.jobs._procs import is_alive, start_ticks
from toolkit.jobs._task_shim import ENV_CWD, ENV_JOB, ENV_PRIMARY
from toolkit.jobs.store import JobStore

_WATCH_INTERVAL = 1.0


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    error: str | None


def task_name(launcher_name: str, primary: str) -> str:
    """The job's name for a launcher task: ``chief-0`` is ``master-0`` in CMLE's dialect."""
    kind, _, index = launcher_name.rpartition("-")
    return f"{primary}-{index}" if kind == "chief" else launcher_name


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _task_env(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            pairs = (item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
            return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs
                    if k.startswith(b"TFDIST_")}
    except OSError:
        return {}


class _Watcher(threading.Thread):
    """Records the launcher's task processes in the store while the job runs."""

    def __init__(self, store: JobStore, job: str, primary: str, job_dir: Path | None = None) -> None:
        super().__init__(name="task-watcher", daemon=True)
        self.store, self.job, self.primary = store, job, primary
        # A tuning supervisor runs several jobs' launchers at once: a task is this job's if its job dir is.
        self.job_dir = None if job_dir is None else str(job_dir.resolve())
        self.stopped = threading.Event()
        self.seen: dict[str, tuple[int, int | None]] = {}

    def run(self) -> None:
        while not self.stopped.wait(_WATCH_INTERVAL):
            self.scan()

    def scan(self) -> None:
        for pid in _children(os.getpid()):
            env = _task_env(pid)
            if "TFDIST_TASK_NAME" not in env or self.job_dir not in (None, env.get("TFDIST_JOB_DIR")):
                continue
            name = task_name(env["TFDIST_TASK_NAME"], self.primary)
            if self.seen.get(name, (None,))[0] != pid:
                self.seen[name] = (pid, start_ticks(pid))
                self.store.update_task(self.job, name, state="RUNNING", pid=pid, pid_start=self.seen[name][1],
                                       restarts=int(env.get("TFDIST_RESTART_COUNT", "0")))
        for name, (pid, ticks) in list(self.seen.items()):
            if not is_alive(pid, ticks):
                self.store.update_task(self.job, name, state="EXITED")
                del self.seen[name]


def _env(plan: LocalPlan) -> dict[str, str]:
    root = str(Path(toolkit.__file__).resolve().parents[1])
    pythonpath = [*plan.pythonpath, root, *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(pythonpath), ENV_PRIMARY: plan.primary,
            ENV_JOB: json.dumps(plan.training_input), ENV_CWD: plan.cwd}


def run_tasks(plan: LocalPlan, job_dir: Path | None, *, store: JobStore | None = None, job: str | None = None,
              max_restarts: int = 0, timeout: float | None = None, stream: TextIO | None = None,
              env: Mapping[str, str] | None = None) -> RunResult:
    """Runs every task of ``plan`` to the end of the job (launcher policy) in ``plan.cwd``.

    With ``store`` and ``job`` the tasks are recorded as they start, restart and end;
    with ``stream`` their prefixed output is echoed there as well as logged per task.
    ``env`` adds variables to every task (a tuning trial's number and directory).
    """
    from toolkit.launcher import launch

    counts = plan.counts
    cmd = [plan.python, "-m", "toolkit.jobs._task_shim", "--", *plan.argv]
    watcher = _Watcher(store, job, plan.primary, job_dir) if store is not None else None
    if watcher is not None:
        watcher.start()
    try:
        result = launch(cmd, chief=1, workers=counts.get("worker", 0), ps=counts.get("ps", 0),
                        evaluator=counts.get("evaluator", 0), job_dir=job_dir, env={**_env(plan), **(env or {})},
                        timeout=timeout if timeout is not None else plan.timeout, max_restarts=max_restarts,
                        stream=stream or sys.stdout, echo=stream is not None)
    finally:
        if watcher is not None:
            watcher.stopped.set()
            watcher.join(timeout=10)
    if store is not None:
        for task in result.tasks:
            state = "SUCCEEDED" if task.exit_code == 0 else ("STOPPED" if task.stopped else "FAILED")
            store.update_task(job, task_name(task.name, plan.primary), state=state, exit_code=task.exit_code,
                              restarts=task.restarts, log_path=str(task.log_path))
    # The launcher says chief-0; the job calls it master-0 (but its log file keeps the launcher's name).
    message = re.sub(r"(?<![/\w])chief-0(?!\.log)", f"{plan.primary}-0", result.message)
    return RunResult(result.exit_code, None if result.ok else message)
