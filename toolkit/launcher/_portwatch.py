"""A task's port, watched from the moment the launcher picks it until the job ends: the race narrowed.

Without a private network namespace another local user can listen on a
task's port (``_ports``). TensorFlow turns ``SO_REUSEPORT`` off, so the
launcher cannot hold the port until TensorFlow binds it; between the pick and
the bind (the seconds a task takes to import TensorFlow) the port is free.
Once the task listens, the kernel refuses anyone else the port (no
``SO_REUSEPORT``, and a wildcard listener blocks a specific address too).

So the window is watched instead of left open:

- ``PortWatch.start`` looks once, before a task starts: a port another user
  already listens on fails the launch before any task could connect to it;
- it then looks every ``FAST`` seconds (10 ms) until this user
  listens on every watched port, and every ``SLOW`` second after that (or
  once ``FAST_FOR`` seconds have passed since a task started: one that never
  listens is no TensorFlow server). A look costs what reading
  ``/proc/net/tcp`` costs (0.1 ms on a plain kernel, 15 ms under some
  sandboxes), so the pause between looks is at least twice the last look's
  cost: the watch never takes more than a third of a core. The
  first foreign listener calls ``on_foreign`` from the watch thread (the
  launchers kill the tasks' process groups there and then, and fail the job
  naming the port, its task and the other user's uid).

What remains: a task that connects to a peer's port in the few milliseconds
between another user's ``listen`` and the next look. A private network
namespace (the local launcher's default) closes it. So does a launch as
root: its local tasks get ports below the kernel's
``ip_unprivileged_port_start`` (``privileged_hosts``), which no other user can
bind at all. Otherwise this is as narrow as a port TensorFlow binds itself can
be watched.
"""
from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toolkit.launcher.local._ports import listeners

__all__ = ["FAST", "FAST_FOR", "PORT_LOST", "SLOW", "PortWatch", "foreign_message", "killer", "privileged_hosts"]

logger = logging.getLogger(__name__)
FAST = 0.01  # seconds between looks while a watched port is not yet this user's listener
SLOW = 1.0   # once every watched port is
FAST_FOR = 60.0  # seconds after a task's start that its port is looked at every FAST seconds
#: begins the output line a remote task's runner (a Ray actor) adds when its port was lost; the message follows
PORT_LOST = "tfdist: port lost: "


_PRIVILEGED_LOW = 512  # below: the well-known services' ports
_UNPRIVILEGED_START = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
_privileged: set[int] = set()  # handed out by this process (trials launch in threads): never twice
_privileged_lock = threading.Lock()


def privileged_hosts(count: int) -> list[str] | None:
    """As root: ``count`` loopback addresses on free ports below ``ip_unprivileged_port_start`` (no other
    user can bind those), for ``generate(hosts=...)``; None when not root, when the kernel lets every user
    bind them (the start is 0 in some containers), or when too few are free."""
    if os.geteuid() != 0:
        return None
    try:
        with open(_UNPRIVILEGED_START, encoding="ascii") as fh:
            start = min(int(fh.read().split()[0]), 1024)
    except (OSError, ValueError, IndexError):
        return None
    import portpicker  # only a launch that picks ports needs it

    candidates = list(range(_PRIVILEGED_LOW, start))
    random.SystemRandom().shuffle(candidates)
    with _privileged_lock:
        picked = []
        for port in candidates:
            if port not in _privileged and portpicker.is_port_free(port):
                picked.append(port)
                if len(picked) == count:
                    _privileged.update(picked)
                    return [f"127.0.0.1:{port}" for port in picked]
    return None


def killer(tasks: Callable[[], Iterable[Any]]) -> Callable[[int, str, int], None]:
    """An ``on_foreign`` for the launcher's tasks (``TaskProcess``): SIGKILLs every task's process group at
    once, each marked as stopped by the launcher."""
    def kill(*_: object) -> None:
        for task in list(tasks()):
            if task.running:
                task.stopped = True
            task.signal_group(signal.SIGKILL)
    return kill


def foreign_message(port: int, task: str, uid: int) -> str:
    """The error a job fails with when another user listens on its port."""
    return (f"port {port} of {task} is listened on by uid {uid}, another user: the job's gRPC clients could reach "
            "their socket, so every task was stopped. Run with a private network namespace (isolate=True, without "
            "--no-isolate) on a shared machine")


class PortWatch:
    """Watches ``ports`` (``{port: task}``) in a thread; ``on_foreign(port, task, uid)`` on the first foreign
    listener, after which it stops (``lost`` says what it found)."""

    def __init__(self, ports: Mapping[int, str], on_foreign: Callable[[int, str, int], None]) -> None:
        self.ports = dict(ports)
        self.on_foreign = on_foreign
        self.lost: tuple[int, str, int] | None = None
        self._pending = set(self.ports)  # not yet seen listened on by this user
        self._fast_until = time.monotonic() + FAST_FOR
        self._cost = 0.0  # seconds the last look took
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfdist-port-watch", daemon=True)

    def start(self) -> PortWatch:
        """Looks once now (before the tasks start), then keeps looking in the thread."""
        self._look()
        if self.lost is None:
            self._thread.start()
        return self

    def rebind(self, task: str) -> None:
        """``task`` restarts: its port is free again until it listens, so it is watched closely again."""
        with self._lock:
            self._pending |= {port for port, name in self.ports.items() if name == task}
            self._fast_until = time.monotonic() + FAST_FOR

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stopped.wait(self._pause()):
            if self._look():
                return

    def _pause(self) -> float:
        fast = self._pending and time.monotonic() < self._fast_until
        return max(FAST if fast else SLOW, 2 * self._cost)

    def _look(self) -> bool:
        """One look; True once a foreign listener was found (and reported)."""
        began = time.monotonic()
        found = listeners(self.ports)
        self._cost = time.monotonic() - began
        me = os.getuid()
        with self._lock:
            self._pending -= {port for port, uid in found.items() if uid == me}
        foreign = [(port, uid) for port, uid in found.items() if uid != me]
        if not foreign or self.lost is not None:
            return bool(foreign)
        port, uid = foreign[0]
        self.lost = (port, self.ports[port], uid)
        logger.error("%s", foreign_message(*self.lost))
        try:
            self.on_foreign(*self.lost)
        except Exception:  # the watch must not die silently; the job still fails on ``lost``
            logger.exception("stopping the tasks after a foreign listener failed")
        return True
