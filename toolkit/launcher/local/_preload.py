"""Preloading: import TensorFlow once, and fork every task of a local cluster from that import.

Without it, each task is a fresh interpreter, and the cluster's tasks import
TensorFlow all at once, competing for the same cores: most of a job's
start-up. With ``LaunchSpec.preload`` the launcher first starts one process (``_zygote.py``)
that imports the modules named, then forks each task from it, so every task
starts with TensorFlow already imported.

A forked task is still what the launcher manages as a task: its own session
and process group (signals, stop, kill), its own output pipe (the prefixed
console lines and its log file), its exit code (reported by the preload
process, which is the task's parent), the same restarts, and the same private
network namespace (the preload process is started inside it). It dies with
the preload process, which dies with the launcher.

What differs from a fresh interpreter, and why preloading is asked for, not
assumed: a task's script finds the preloaded modules already imported, so
settings that only act *at import* (``KERAS_BACKEND``, ``TF_CPP_MIN_LOG_LEVEL``
set by the script itself before ``import tensorflow``) come too late; and the
command must be this interpreter running a script or a module, without
interpreter options. Environment variables given to the launcher reach the
preload process, so they do act at import.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

#: what ``tfdist launch --preload`` preloads when no module is named
DEFAULT_PRELOAD = ("tensorflow", "keras")

_ZYGOTE = Path(__file__).with_name("_zygote.py")
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_READY_TIMEOUT = 300.0   # the imports, on a loaded machine
_REPLY_TIMEOUT = 30.0    # a fork
_MAX_PACKET = 1 << 20


class PreloadError(RuntimeError):
    """The preload process could not start, import its modules, or fork a task."""


def module_problem(name: object) -> str | None:
    """Why ``name`` cannot be a module to preload, or None."""
    if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
        return f"{name!r} is not a module name (e.g. 'tensorflow' or 'tensorflow.keras')"
    return None


def command_problem(cmd: Sequence[str], cwd: str | None) -> str | None:
    """Why ``cmd`` cannot be forked from a preload process, or None.

    ``cmd`` is resolved (``python`` is already ``sys.executable``): it must be
    this interpreter running ``SCRIPT ARGS`` or ``-m MODULE ARGS``.
    """
    if os.path.abspath(cmd[0]) != os.path.abspath(sys.executable):
        return (f"the command runs {cmd[0]!r}; preloaded tasks are forks of this interpreter ({sys.executable}), "
                "so the command must start with `python`")
    if len(cmd) < 2 or cmd[1] == "-m" and len(cmd) < 3:
        return "the command names no script; preloaded tasks run `python SCRIPT ARGS` or `python -m MODULE ARGS`"
    if cmd[1] == "-m":
        return module_problem(cmd[2])
    if cmd[1].startswith("-"):
        return (f"the command passes the interpreter option {cmd[1]!r}; preloaded tasks run `python SCRIPT ARGS` "
                "or `python -m MODULE ARGS`, without interpreter options")
    if not os.path.isfile(os.path.join(cwd or os.getcwd(), cmd[1])):
        return f"the script {cmd[1]!r} does not exist in {cwd or os.getcwd()}"
    return None


class ForkedTask:
    """A task forked by the preload process, with the part of ``subprocess.Popen`` the launcher uses."""

    def __init__(self, pid: int, stdout: IO[bytes], preloader: Preloader) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._preloader = preloader

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._preloader.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"task {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode


class Preloader:
    """The preload process of one job: started (and its modules imported) on construction."""

    def __init__(self, modules: Sequence[str], *, env: Mapping[str, str], cwd: str | os.PathLike[str] | None,
                 log_path: Path,
                 wrap: Callable[[Sequence[str]], list[str]] | None = None,
                 preexec: Callable[[], None] | None = None) -> None:
        self.modules = tuple(modules)
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, str(_ZYGOTE), str(theirs.fileno()), *self.modules]
        started = time.monotonic()
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                wrap(cmd) if wrap is not None else cmd, env={**env, "PYTHONUNBUFFERED": "1"}, cwd=cwd,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),),
                start_new_session=True, preexec_fn=preexec)  # noqa: PLW1509 - only prctl and getppid run there
        theirs.close()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._codes: dict[int, int] = {}
        self._gone = threading.Event()
        self._lock = threading.Lock()
        self._spawning = threading.Lock()  # one request in flight: its reply is the next one
        self._next = 0
        first = self._first_message(log_path)
        if "error" in first:
            self.close()
            raise PreloadError(first["error"])
        self._reader = threading.Thread(target=self._read, daemon=True, name="tfdist-launch-preload")
        self._reader.start()
        logger.info("preloaded %s in %.1f s (pid %d); tasks are forked from it", ", ".join(self.modules),
                    time.monotonic() - started, self.proc.pid)

    def _first_message(self, log_path: Path) -> dict[str, Any]:
        self._sock.settimeout(_READY_TIMEOUT)
        try:
            data = self._sock.recv(_MAX_PACKET)
        except TimeoutError:
            self.close()
            raise PreloadError(f"importing {', '.join(self.modules)} took over {_READY_TIMEOUT:g} s") from None
        finally:
            self._sock.settimeout(None)
        if not data:
            self.proc.wait(timeout=10)
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            self.close()
            raise PreloadError(f"the preload process exited with code {self.proc.returncode} before it was ready"
                               + (":\n" + "\n".join(tail) if tail else ""))
        message: dict[str, Any] = json.loads(data)
        return message

    def _read(self) -> None:
        try:
            while True:
                data = self._sock.recv(_MAX_PACKET)
                if not data:
                    break
                message = json.loads(data)
                if "exited" in message:
                    with self._lock:
                        self._codes[message["exited"]] = message["code"]
                else:
                    self._replies.put(message)
        except OSError:
            pass
        finally:
            self._gone.set()
            self._replies.put({"error": "the preload process has exited"})

    @property
    def alive(self) -> bool:
        return not self._gone.is_set()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str] | None, *,
              name: str | None = None) -> ForkedTask:
        """Forks a task running ``python ARGV`` with ``env`` in ``cwd``; its output is the returned task's stdout.

        ``name`` becomes the task's process name (``ps``, ``/proc/PID/comm``).
        """
        if not self.alive:
            raise PreloadError("the preload process has exited")
        read_end, write_end = os.pipe()
        with self._lock:
            self._next += 1
            number = self._next
        request = {"spawn": number, "argv": list(argv), "env": dict(env), "cwd": os.fspath(cwd or os.getcwd()),
                   "name": name}
        try:
            with self._spawning:
                socket.send_fds(self._sock, [json.dumps(request).encode()], [write_end])
                reply = self._replies.get(timeout=_REPLY_TIMEOUT)
        except (OSError, queue.Empty) as exc:
            os.close(read_end)
            raise PreloadError(f"the preload process did not fork the task: {exc or 'no answer'}") from exc
        finally:
            os.close(write_end)
        if "pid" not in reply:
            os.close(read_end)
            raise PreloadError(str(reply.get("error", reply)))
        return ForkedTask(int(reply["pid"]), os.fdopen(read_end, "rb"), self)

    def exit_code(self, pid: int) -> int | None:
        """``pid``'s exit code once it ended; a task still there after the preload process died is not yet."""
        with self._lock:
            if pid in self._codes:
                return self._codes[pid]
        if self.alive:
            return None
        try:  # its parent is gone, so it was killed with it (a parent-death signal), or soon will be
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL
        except PermissionError:
            pass
        return None

    def close(self) -> None:
        """Lets the preload process go: it kills any task it forked that is still running, and exits."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
