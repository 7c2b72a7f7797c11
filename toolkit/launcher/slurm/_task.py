"""``python -m toolkit.launcher.slurm._task ... -- CMD``: one TensorFlow task under ``srun``.

srun starts this on every node; it derives the task's TF_CONFIG from Slurm's
variables (``tf_config.from_env``, the job's layout and port rule), names the
task (``worker-1``) and runs CMD with the launcher's per-task environment, its
output appended to ``<job dir>/logs/<task>.log``, in a session of its own (as
the local launcher's tasks: Slurm starts a node's tasks in one session, which
the kernel's autogroup scheduler would give one process's share of the CPU).
It restarts CMD as the launcher's ``FailurePolicy`` says, and passes SIGTERM
(scancel, Slurm's ``--signal``, a preemption) on to CMD (docs/preemption.md).

Its status file, ``<job dir>/slurm/tasks/<task>.json`` (node, pid, state, exit
code, times, restarts by cause), is the per-task accounting Slurm keeps none of
without slurmdbd; the launcher reads it, and a file still ``RUNNING`` after the
Slurm job ended means the task was killed with the job.
"""
from __future__ import annotations

import argparse
import contextlib
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
from toolkit.hypertune import task_environment
from toolkit.launcher._dialect import Dialect
from toolkit.launcher._policy import Decision, FailurePolicy, TaskExit
from toolkit.launcher._portwatch import PortWatch, foreign_message
from toolkit.launcher._result import EXIT_TASK_FAILED, is_preemption
from toolkit.launcher._signal_dir import remove_if_empty
from toolkit.launcher._spec import (
    ENV_JOB_DIR,
    ENV_RESTART_COUNT,
    ENV_SIGNAL_DIR,
    ENV_TASK_DIR,
    ENV_TASK_NAME,
    LaunchError,
)
from toolkit.launcher._task import armed_env, die_with_parent, shell_exit_code
from toolkit.launcher.slurm._shared import status_dir

__all__ = ["main"]


def _write_status(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


class _Forward:
    """Passes SIGTERM/SIGINT on to the running child's process group and remembers that we were stopped."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.stopped = False
        self.port_lost: str | None = None  # another user listened on the task's port: killed, never restarted

    def lose_port(self, port: int, task: str, uid: int) -> None:
        """``PortWatch``'s ``on_foreign``: the task is killed, the job fails naming the port."""
        self.port_lost = foreign_message(port, task, uid)
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)

    def __call__(self, signum: int, frame: Any) -> None:
        self.stopped = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.child.pid, signum)


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
    status: dict[str, Any] = {
        "name": name, "rank": derived.placement.rank, "node": os.environ.get("SLURMD_NODENAME"),
        "host": socket.gethostname(), "address": address, "pid": None, "restarts": 0, "failures": 0,
        "preemptions": 0, "state": "RUNNING", "exit_code": None, "chief": is_chief,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "started_at": None, "ended_at": None}
    policy = FailurePolicy(max_restarts=args.max_restarts, settle_period=args.settle_period,
                           parameter_server=bool(derived.layout.ps), max_preemptions=args.max_preemptions)
    forward = _Forward()
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    env = armed_env({**task_environment(os.environ, name, is_chief=is_chief), "TF_CONFIG": cfg.to_json(),
                     ENV_JOB_DIR: str(job_dir), ENV_TASK_DIR: str(task_dir), ENV_TASK_NAME: name})
    while True:
        runs = status["failures"] + status["preemptions"]
        with open(log_path, "ab") as log:
            # its own session (see the module's doc), dying with this wrapper
            forward.child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env={**env, ENV_RESTART_COUNT: str(args.runs_before + runs)},
                                             start_new_session=True, preexec_fn=die_with_parent())
        status.update(pid=forward.child.pid, restarts=runs, started_at=time.time())
        _write_status(status_path, status)
        watch = PortWatch({int(address.rpartition(":")[2]): name}, forward.lose_port).start()  # _portwatch
        code = forward.child.wait()
        watch.stop()
        if forward.port_lost is not None:
            with open(log_path, "ab") as log:
                log.write(f"tfdist: {forward.port_lost}\n".encode())
            print(f"{name}: {forward.port_lost}", file=sys.stderr)
            status["reason"], code = forward.port_lost, EXIT_TASK_FAILED  # a failure of the job, as locally
            break
        if code == 0 or forward.stopped:
            break
        preempted = is_preemption(code)
        decision = policy.decide(TaskExit(task_type=task.type, is_chief=is_chief, exit_code=code,
                                          seconds_since_exit=args.settle_period, task_restarts=status["failures"],
                                          preemptions=status["preemptions"]))
        if decision is not Decision.RESTART_TASK:
            break
        status["preemptions" if preempted else "failures"] += 1
        budget = (f"preemption {status['preemptions']} of {args.max_preemptions}" if preempted
                  else f"{status['failures']} of {args.max_restarts}")
        print(f"{name}: {'was preempted' if preempted else 'exited'} with {code}; restarting it ({budget})",
              file=sys.stderr)
        time.sleep(0.5)
    status.update(state=_final_state(code, stopped=forward.stopped), exit_code=code, ended_at=time.time())
    _write_status(status_path, status)
    remove_if_empty(env.get(ENV_SIGNAL_DIR))  # this node's copy of the job's signal directory, once unused
    return shell_exit_code(code)


def _final_state(code: int, *, stopped: bool) -> str:
    """How the task's last run ended: a preemption is its own state, not a failure and not a stop."""
    if code == 0:
        return "SUCCEEDED"
    if is_preemption(code):
        return "PREEMPTED"
    return "STOPPED" if stopped else "FAILED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.launcher.slurm._task")
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--layout", required=True)
    parser.add_argument("--dialect", required=True, help="the Dialect's fields as JSON")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--max-preemptions", type=int, default=3)
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
    except LaunchError as exc:  # the failure policy's fields, as the launcher passed them
        print(f"error: this task cannot start: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
