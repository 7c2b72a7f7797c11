"""The Ray actor behind one TensorFlow task: it reserves a port on its node and runs the entrypoint.

One actor per task (``ps-0``, ``chief-0``, ``worker-1``, ...). It runs on the
node its placement-group bundle landed on and:

- reports that node's id and the address Ray knows it by (Ray rewrites
  127.0.0.1 to the host's IP, so TF_CONFIG must use this address);
- reserves a free port by binding it and holding the socket until the task
  starts, so actors that share a host (every node of a one-machine cluster)
  never get the same port;
- runs the user's unchanged entrypoint as a subprocess in its own process
  group, with ``PR_SET_PDEATHSIG`` so the subprocess dies with the actor
  (an actor killed by Ray, or lost with its driver, leaves nothing behind);
- buffers the subprocess's output lines for the driver to read (long poll);
- holds on when its own process gets SIGTERM (a machine being taken away
  signals every process on it, Ray's worker included): it passes the signal
  to the task, waits up to the task's preemption grace for it to checkpoint
  and exit 143, and for the driver to read that code, and only then lets
  Ray's own handler end the worker. Without it the task would die with the
  actor (SIGKILL) mid-checkpoint, and the driver would see a lost actor, a
  failure, where there was a preemption.

This module imports Ray; only ``toolkit.launcher.ray`` loads it, lazily.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

import ray

from tf_config.ports import pick_port
from toolkit.launcher._portwatch import PORT_LOST, PortWatch, foreign_message
from toolkit.launcher._signal_dir import remove_if_empty
from toolkit.launcher._spec import ENV_SIGNAL_DIR
from toolkit.launcher._task import die_with_parent, preemption_grace

_MAX_BUFFERED = 20000  # lines kept for a driver that stopped reading
_READ_WAIT = 3.0  # seconds the driver gets to read the exit code of a task preempted with its actor


def _bound(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        raise
    return sock


class TaskRunner:
    """Holds one task's port, process and output on its Ray node."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._socket: socket.socket | None = None
        self._port: int | None = None  # the task's, reserved here; watched from its start (``_portwatch``)
        self._watch: PortWatch | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._first = 0            # index of self._lines[0] in the task's whole output
        self._cond = threading.Condition()
        self._done = False
        self._code_read = False    # the driver has read the current run's exit code
        self._wait = preemption_grace({})  # the task's preemption grace, and time to exit
        self._ray_sigterm: object = None
        if threading.current_thread() is threading.main_thread():  # where Ray builds an actor (and signals go)
            self._ray_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        """Passes the signal to the task, waits for it to checkpoint and exit and for the driver to read
        its code, then lets Ray's handler end the worker (see the module's doc)."""
        proc = self._proc
        if proc is not None and self.stop(signal.SIGTERM):
            with contextlib.suppress(subprocess.TimeoutExpired):  # past it, the task dies with the worker
                proc.wait(self._wait)
            with self._cond:
                self._cond.wait_for(lambda: self._code_read, timeout=_READ_WAIT)
        previous = self._ray_sigterm
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def where(self) -> dict[str, str | int]:
        """The node this actor runs on: Ray's node id, its IP address, and the actor's pid."""
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def reserve(self, port: int = 0) -> int:
        """Binds ``port`` (0: a free one) on every interface and holds it until ``start``.

        A free port is picked outside the ephemeral range (``tf_config.ports``): the task's
        server binds it only after importing TensorFlow, and in between no outgoing
        connection on the node can take it.
        """
        self._release()
        try:
            self._socket = _bound(port or pick_port())
        except OSError:
            if port:
                raise
            self._socket = _bound(0)  # taken since the pick: the kernel's own pick then
        self._port = self._socket.getsockname()[1]
        return self._port

    def _release(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def start(self, cmd: Sequence[str], env: Mapping[str, str], driver_python: str,
              cwd: str | None = None) -> tuple[int, int]:
        """Starts (or restarts) the task in ``cwd``; returns its pid here and the cursor its output starts at."""
        self.stop(signal.SIGKILL)
        self._wait_reader()
        # The driver's interpreter (``python`` in the entrypoint) means this node's.
        argv = [sys.executable if part == driver_python else part for part in cmd]
        full_env = {**os.environ, **env}
        self._wait = preemption_grace(full_env)  # checked by the driver's launcher before the job started
        for key in ("TFDIST_JOB_DIR", "TFDIST_TASK_DIR"):
            if key in env:
                os.makedirs(env[key], exist_ok=True)
        self._release()  # the task's server binds the port the reservation held
        self._proc = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                                      preexec_fn=die_with_parent())
        with self._cond:
            self._done = self._code_read = False
            cursor = self._first + len(self._lines)
        self._reader = threading.Thread(target=self._pump, args=(self._proc, env.get(ENV_SIGNAL_DIR)), daemon=True)
        self._reader.start()
        if self._port:  # on this node, another user could listen on it before the task does (``_portwatch``)
            self._watch = PortWatch({self._port: self.name}, self._port_lost).start()
        return self._proc.pid, cursor

    def _port_lost(self, port: int, task: str, uid: int) -> None:
        """Kills the task and tells the driver, whose launcher fails the job naming the port."""
        with self._cond:  # the note first: the driver reads it before it sees the task's exit
            self._lines.append(PORT_LOST + foreign_message(port, task, uid))
            self._cond.notify_all()
        self.stop(signal.SIGKILL)

    def _pump(self, proc: subprocess.Popen[bytes], signals: str | None = None) -> None:
        assert proc.stdout is not None  # started with stdout=PIPE
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self._cond:
                self._lines.append(line)
                if len(self._lines) > _MAX_BUFFERED:
                    drop = len(self._lines) - _MAX_BUFFERED
                    del self._lines[:drop]
                    self._first += drop
                self._cond.notify_all()
        proc.stdout.close()
        proc.wait()
        if self._watch is not None:
            self._watch.stop()
        remove_if_empty(signals)  # this node's copy of the job's signal directory, unless another task uses it
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def _wait_reader(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.join(10.0)

    def read(self, cursor: int, wait: float = 1.0) -> tuple[list[str], int, int | None]:
        """Output lines from ``cursor`` on, the next cursor, and the exit code once the task ended.

        Waits up to ``wait`` seconds for something new, so the driver's reader
        needs no sleeps; lines before ``cursor`` are dropped (they were read).
        """
        with self._cond:
            if cursor - self._first >= len(self._lines) and not self._done:
                self._cond.wait(wait)
            start = max(cursor, self._first)
            lines = self._lines[start - self._first:]
            del self._lines[:max(0, cursor - self._first)]
            self._first = max(self._first, cursor)
            code = self._proc.returncode if self._done and self._proc is not None else None
            if code is not None:
                self._code_read = True
                self._cond.notify_all()
            return lines, start + len(lines), code

    def stop(self, sig: int = signal.SIGTERM) -> bool:
        """Signals the task's process group; False if nothing was running."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True


RemoteTaskRunner = ray.remote(max_concurrency=4)(TaskRunner)
