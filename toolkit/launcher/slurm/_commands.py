"""Slurm's client commands (sbatch, squeue, scontrol, scancel), run without a shell.

Each returns parsed data or raises ``LaunchError`` with Slurm's own message; a
command missing from PATH is named with how to get it.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from toolkit.launcher._spec import LaunchError

__all__ = ["FINAL_STATES", "job_info", "require", "run", "scancel", "squeue_state"]

_log = logging.getLogger(__name__)
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE"})
_TIMEOUT = 30.0


def require(*names: str, field: str = "backend") -> None:
    """Refuses to go on when a Slurm command is not on PATH."""
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        raise LaunchError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH; the Slurm "
                          "backend runs Slurm's client commands. Run on a Slurm login node, add Slurm's bin "
                          "directory to PATH, or install the client (Debian: apt-get install slurm-client).",
                          field=field)


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, check: bool = True) -> str:
    """The command's stdout; LaunchError with its stderr when it fails (``check``)."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=_TIMEOUT,
                             env=None if env is None else dict(env))
    except FileNotFoundError:
        require(argv[0])
        raise
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"{argv[0]} did not answer within {_TIMEOUT:g} s; is slurmctld up?",
                          field="backend") from exc
    if check and out.returncode != 0:
        raise LaunchError(f"{argv[0]} failed: {(out.stderr or out.stdout).strip()}", field="backend")
    return out.stdout


def squeue_state(job_id: str) -> str | None:
    """The job's state while Slurm still queues or runs it (PENDING, RUNNING, ...), else None."""
    out = run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).strip()
    return out.splitlines()[0].strip() if out else None


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job -o``'s fields (JobState, NodeList, ExitCode, Reason, ...); {} once forgotten."""
    out = run(["scontrol", "show", "job", "-o", job_id], check=False).strip()
    fields: dict[str, str] = {}
    for token in out.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def scancel(job_id: str) -> None:
    """Cancels the job (every step, every node); a job already gone is fine."""
    run(["scancel", job_id], check=False)
