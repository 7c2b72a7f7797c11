"""``python -m toolkit.launcher.slurm._task ... -- CMD``: one TensorFlow task under ``srun``.

srun starts this on every node; it derives the task's TF_CONFIG from Slurm's
variables (``tf_config.from_env``, the job's layout and port rule), names the
task (``worker-1``) and runs CMD with the launcher's per-task environment, its
output appended to ``<job dir>/logs/<task>.log``. It reports itself in
``<job dir>/slurm/tasks/<task>.json`` (node, pid, restarts, exit code), which
the launcher reads, and restarts CMD as the launcher's ``FailurePolicy`` says
(a parameter-server worker alone, with the same TF_CONFIG and port). SIGTERM
(scancel, Slurm's ``--signal`` before the time limit, a preemption) is passed
on to CMD, which checkpoints and exits 143 (docs/preemption.md).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tf_config import TFConfigError, from_env
from toolkit.launcher._dialect import Dialect
from toolkit.launcher._policy import Decision, FailurePolicy, TaskExit
from toolkit.launcher._spec import ENV_JOB_DIR, ENV_RESTART_COUNT, ENV_TASK_DIR, ENV_TASK_NAME
from toolkit.launcher.slurm._shared import status_dir

__all__ = ["main"]


def _write_status(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


class _Forward:
    """Passes SIGTERM/SIGINT on to the running child and remembers that we were stopped."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.stopped = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.stopped = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def _run_task(args: argparse.Namespace, cmd: list[str]) -> int:
    job_dir = Path(args.job_dir)
    derived = from_env(os.environ, layout=args.layout, port=args.port, kind="slurm")
    dialect = Dialect(**json.loads(args.dialect))
    cfg = dialect.apply(derived.tf_config)
    task = derived.tf_config.task
    assert task is not None  # from_env always sets it
    name = dialect.task_name(f"{task.type}-{task.index}")
    is_chief = task.type == "chief" or (task.type == "worker" and task.index == 0 and "chief" not in cfg.cluster
                                        and dialect.chief not in cfg.cluster)
    task_dir = job_dir / "tasks" / name
    for directory in (task_dir, job_dir / "logs", status_dir(job_dir)):
        directory.mkdir(parents=True, exist_ok=True)
    status_path = status_dir(job_dir) / f"{name}.json"
    log_path = job_dir / "logs" / f"{name}.log"
    address = derived.tf_config.cluster[task.type][task.index]
    status = {"name": name, "rank": derived.placement.rank, "node": os.environ.get("SLURMD_NODENAME"),
              "host": socket.gethostname(), "address": address, "pid": None, "restarts": 0,
              "state": "RUNNING", "exit_code": None, "chief": is_chief}
    policy = FailurePolicy(max_restarts=args.max_restarts, settle_period=args.settle_period,
                           parameter_server=bool(derived.layout.ps))
    forward = _Forward()
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    env = {**os.environ, "TF_CONFIG": cfg.to_json(), ENV_JOB_DIR: str(job_dir), ENV_TASK_DIR: str(task_dir),
           ENV_TASK_NAME: name}
    restarts = 0
    while True:
        with open(log_path, "ab") as log:
            forward.child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env={**env, ENV_RESTART_COUNT: str(args.runs_before + restarts)})
        _write_status(status_path, {**status, "pid": forward.child.pid, "restarts": restarts})
        code = forward.child.wait()
        if code == 0 or forward.stopped:
            break
        decision = policy.decide(TaskExit(task_type=task.type, is_chief=is_chief, exit_code=code,
                                          seconds_since_exit=args.settle_period, task_restarts=restarts))
        if decision is not Decision.RESTART_TASK:
            break
        restarts += 1
        print(f"{name}: exited with {code}; restarting it ({restarts} of {args.max_restarts})", file=sys.stderr)
        time.sleep(0.5)
    state = "SUCCEEDED" if code == 0 else ("STOPPED" if forward.stopped else "FAILED")
    _write_status(status_path, {**status, "pid": forward.child.pid, "restarts": restarts, "state": state,
                                "exit_code": code})
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.launcher.slurm._task")
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--layout", required=True)
    parser.add_argument("--dialect", required=True, help="the Dialect's fields as JSON")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--settle-period", type=float, default=10.0)
    parser.add_argument("--runs-before", type=int, default=0, help="runs of this job before this Slurm job")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    try:
        return _run_task(args, cmd)
    except TFConfigError as exc:
        print(f"error: this task's TF_CONFIG cannot be derived: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
