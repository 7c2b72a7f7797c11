"""The preload process: imports modules once, then forks every task of a local cluster from them.

The launcher (``toolkit.launcher.local._preload``) runs this file as a script,
``python _zygote.py FD MODULE...``. It uses the standard library only, so a
task forked from it holds the preloaded modules and nothing of the launcher.

Protocol, one JSON object per packet on the ``SOCK_SEQPACKET`` socket ``FD``:

- zygote -> launcher, once the imports are done: ``{"ready": true}``, or
  ``{"error": "<traceback>"}`` and the zygote exits.
- launcher -> zygote: ``{"spawn": N, "argv": [...], "env": {...}, "cwd": DIR, "name": TASK}``
  with the task's output pipe attached as a file descriptor. ``argv`` is what
  follows the interpreter: ``["train.py", ...]`` or ``["-m", "pkg.mod", ...]``.
- zygote -> launcher: ``{"spawned": N, "pid": PID}`` or ``{"spawned": N, "error": TEXT}``.
- zygote -> launcher, whenever a task ends: ``{"exited": PID, "code": CODE}``,
  CODE as ``subprocess`` reports it (``-N``: killed by signal N).

A forked task starts a new session (its pid is its process group, so the
launcher signals its group as it does a spawned task's), dies with the zygote
(a parent-death signal), which dies with the launcher, and then runs its
script exactly as ``python`` would (only its process name, ``/proc/PID/comm``, is the
task's, e.g. ``worker-1``, so that ``ps`` tells the tasks apart; the zygote's own is
``tfdist-preload``): ``sys.argv``, ``sys.path[0]``, the
environment and the working directory are the task's, ``__name__`` is
``"__main__"``, and it ends through the interpreter's normal exit (threads
joined, ``atexit`` run), with the exit code and traceback ``python`` gives.

The garbage collector is off in the zygote, and its objects are frozen
(``gc.freeze()``) before each fork, as the ``gc`` module's documentation advises
for processes that fork without exec: a task's collections, and the final
one at its exit, then never write to (and so copy) the pages it shares with
the zygote.

When the launcher's end of the socket closes, the zygote kills every task it
forked that is still running, and exits.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback
from typing import Any

_MAX_PACKET = 1 << 20
PROCESS_NAME = "tfdist-preload"
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _preload(modules: list[str]) -> str | None:
    """Imports ``modules``; why the first that fails did (its traceback goes to stderr), else None."""
    for name in modules:
        try:
            __import__(name)
        except BaseException as exc:  # noqa: BLE001 - reported to the launcher, which names the module
            traceback.print_exc()
            return f"importing {name!r} failed: {''.join(traceback.format_exception_only(exc)).strip()}"
    return None


def _reap(sock: socket.socket, children: set[int]) -> None:
    """Reports every forked task that has ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _serve(sock: socket.socket) -> tuple[dict[str, Any], int] | None:
    """Forks tasks on request until the launcher lets go (None), or returns a task's request in its child."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only to wake the select below
    signal.set_wakeup_fd(wake_write)
    children: set[int] = set()
    watched: list[Any] = [sock, wake_read]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if wake_read in ready:
            os.read(wake_read, 512)
            _reap(sock, children)
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, _MAX_PACKET, 1)
        if not data:  # the launcher is gone: nothing it started may outlive it
            for pid in children:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            return None
        request = json.loads(data)
        if len(fds) != 1:
            _send(sock, {"spawned": request.get("spawn"), "error": "no output pipe came with the request"})
            for fd in fds:
                os.close(fd)
            continue
        sys.stdout.flush()  # nothing buffered may be written twice
        sys.stderr.flush()
        gc.freeze()  # the preloaded objects: the task's collections will not touch (and so copy) their pages
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(fds[0])
            _send(sock, {"spawned": request["spawn"], "error": f"fork failed: {exc}"})
            continue
        if pid == 0:
            gc.enable()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_read)
            os.close(wake_write)
            sock.close()
            return request, fds[0]
        os.close(fds[0])
        children.add(pid)
        _send(sock, {"spawned": request["spawn"], "pid": pid})


def _become_task(request: dict[str, Any], out_fd: int) -> None:
    """The forked child turns into the task: session, parent-death signal, stdio, directory, environment."""
    os.setsid()
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if request.get("name"):  # the task's name, not the preload process's
        _set_name(request["name"])
    if os.getppid() != parent:  # the zygote died before prctl took effect
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if os.environ.get("TFDIST_HAND_BUILT"):  # what the launcher's sitecustomize does in a fresh interpreter
        from strategies._hand_built import install_if_imported

        install_if_imported()


def _user_frames(tb: Any) -> Any:
    """The traceback from the task's own code on, as ``python script.py`` would print it."""
    skip = {__file__, os.path.abspath(__file__), runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename in skip:
        tb = tb.tb_next
    return tb


def _run_task(argv: list[str]) -> None:
    """Runs ``python ARGV`` in this process; SystemExit and KeyboardInterrupt leave as they would there."""
    try:
        if argv[0] == "-m":
            sys.argv = ["-m", *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - printed as python prints an uncaught exception
        tb = _user_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # the hook prints the exception's own traceback
        sys.exit(1)


def _set_name(name: str) -> None:
    """The process name ``ps`` and ``/proc/PID/comm`` show (15 bytes at most)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def main(fd: int, modules: list[str]) -> None:
    gc.disable()  # as the gc module's docs advise before a fork: no freed holes in the pages the tasks share
    _set_name(PROCESS_NAME)
    sock = socket.socket(fileno=fd)
    sys.path[0] = os.getcwd()  # as under `python -m`, not this file's directory
    error = _preload(modules)
    _send(sock, {"error": error} if error else {"ready": True})
    if error:
        sys.exit(1)
    served = _serve(sock)
    if served is None:
        os._exit(0)  # nothing to finalize: tearing down the preloaded modules would only cost the launcher time
    request, out_fd = served
    _become_task(request, out_fd)
    _run_task(request["argv"])


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
