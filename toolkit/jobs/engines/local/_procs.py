"""Process identity and signalling that survive pid reuse.

A job record outlives the processes it names; by the time someone looks again
the pid may belong to an unrelated process. Every pid is therefore stored with
its start time (``/proc/<pid>/stat`` field 22), and a process only counts as
"the same one" if both match. Before a signal, it must also be proven the
job's: it runs as this user, and its environment (``/proc/<pid>/environ``,
which only its user and root can read) carries the job's nonce
(``TFDIST_JOB_NONCE``, random per supervisor). A record forged in a store
another user could write, naming some process's pid and start time, then
makes no one signal it. A job recorded before nonces existed has none; its
processes are signalled on the checks of that time, made stricter: this
user's, the recorded start time, and a command line that carries what the
job's command carried (``legacy``: the supervisor's ``-m
toolkit.jobs.supervisor <job> --home <home>``, a task's ``-m <module>``).
Tasks and supervisors are session leaders
(``start_new_session=True``), so their pid is also their process group id.
"""
from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence

_log = logging.getLogger(__name__)


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if unknown."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def is_alive(pid: int | None, ticks: int | None = None) -> bool:
    """True if ``pid`` runs, is not a zombie, and (if ``ticks`` is given) started at ``ticks``."""
    if not pid:
        return False
    fields = _stat_fields(pid)
    if fields is None:
        if os.path.isdir("/proc"):
            return False
        try:  # no /proc (not Linux): existence is all we can check
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in (b"Z", b"X"):
        return False
    return ticks is None or int(fields[19]) == ticks


ENV_JOB_NONCE = "TFDIST_JOB_NONCE"  # as toolkit.launcher's: every task of the job inherits the supervisor's
_MAX_ENVIRON = 1 << 20


def is_the_jobs(pid: int, nonce: str | None, *, legacy: Sequence[str] | None = None) -> bool:
    """Whether process ``pid`` provably belongs to the job whose nonce is ``nonce``: this user's, with
    ``TFDIST_JOB_NONCE=<nonce>`` in its environment. A job recorded before nonces (``nonce`` None) is
    matched on ``legacy`` instead: arguments its command line must carry, in a row. Without ``/proc``
    (not Linux) nothing can be proven, and the pid and start time are all there is."""
    if not os.path.isdir("/proc"):
        return True
    if not nonce and not legacy:
        return False
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return False
        if not nonce:
            return _carries(_cmdline(pid), [a.encode() for a in legacy or ()])
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read(_MAX_ENVIRON)
    except OSError:
        return False
    return f"{ENV_JOB_NONCE}={nonce}".encode() in environ.split(b"\0")


def _cmdline(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read(_MAX_ENVIRON).split(b"\0")


def _carries(argv: list[bytes], wanted: list[bytes]) -> bool:
    """Whether ``wanted`` appears in ``argv`` as consecutive arguments."""
    return bool(wanted) and any(argv[i:i + len(wanted)] == wanted for i in range(len(argv) - len(wanted) + 1))


def signal_group(pid: int | None, ticks: int | None, sig: int, *, nonce: str | None,
                 legacy: Sequence[str] | None = None) -> bool:
    """Sends ``sig`` to the process group led by ``pid`` if it is still the same process and provably the
    job's (``is_the_jobs``; ``legacy`` for a job recorded before nonces)."""
    if pid is None or not is_alive(pid, ticks):
        return False
    if not is_the_jobs(pid, nonce, legacy=legacy):
        _log.warning("not signalling pid %d: it does not carry this job's nonce in its environment, or another "
                     "user runs it (a stale or forged record)", pid)
        return False
    if not nonce:
        _log.warning("job recorded without a nonce (before tfdist recorded one): signalling pid %d on its user, "
                     "start time and command line (%s)", pid, " ".join(legacy or ()))
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(pid, sig)
    return True


def stop_groups(processes: list[tuple[int, int | None]], *, nonce: str | None, grace: float = 5.0,
                legacy: Sequence[str] | None = None) -> None:
    """SIGTERM every live group of the job, wait up to ``grace`` seconds, then SIGKILL the rest."""
    live = [(p, t) for p, t in processes if signal_group(p, t, signal.SIGTERM, nonce=nonce, legacy=legacy)]
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        live = [(p, t) for p, t in live if is_alive(p, t)]
    for pid, ticks in live:
        signal_group(pid, ticks, signal.SIGKILL, nonce=nonce, legacy=legacy)
