"""One task of a Ray launch, seen from the driver: the local launcher's ``TaskProcess`` over an actor.

It offers the same surface as ``toolkit.launcher._task.TaskProcess``
(``start``, ``poll``, ``running``, ``signal_group``, ``join_output``, ``tail``,
``proc.wait``), so the local launcher's control loop and failure policy drive
Ray tasks unchanged. Output arrives from the actor by long polls and goes,
prefixed ``[worker-1]``, to the console and to ``logs/<task>.log`` on the
driver's machine, whichever node the task ran on.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import ray

from toolkit.launcher._portwatch import PORT_LOST
from toolkit.launcher._result import EXIT_PREEMPTED, EventKind, TaskEvent
from toolkit.launcher._task import TaskBase, armed_env

logger = logging.getLogger(__name__)

_CALL_TIMEOUT = 30.0
_DIED_GRACE = 10.0  # seconds a dead actor gets to come back through Ray's own restart
ACTOR_LOST = -int(signal.SIGKILL)  # the exit code a task gets when its actor (or node) vanished


def death_of(name: str, exc: BaseException) -> tuple[int, str]:
    """The exit code a task gets when its actor died under it, and the log's note saying why.

    Ray tells when the actor's node was drained for preemption (a spot instance
    reclaimed, ``ray drain-node --reason=DRAIN_NODE_REASON_PREEMPTION``): the
    machine was taken away, so the task is preempted (``EXIT_PREEMPTED``), which
    the failure policy restarts on the ``max_preemptions`` budget. Any other
    death is a failure (``ACTOR_LOST``).
    """
    if getattr(exc, "preempted", False):
        return EXIT_PREEMPTED, f"----- {name}: its Ray node was drained for preemption; the task was preempted -----"
    return ACTOR_LOST, f"----- {name}: its Ray actor died ({type(exc).__name__}) -----"


class _Waiter:
    """``proc.wait(timeout)`` for ``stop_all``: waits for the output reader to see the exit."""

    def __init__(self, task: RayTask) -> None:
        self.task = task

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.task.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)


class RayTask(TaskBase):
    """A task of the job, run by a Ray actor that keeps the task's port, process and output."""

    def __init__(self, name: str, *, make_actor: Callable[[], Any], log_path: Path, stream: IO[str] | None,
                 lock: threading.Lock, start_timeout: float,
                 on_event: Callable[[TaskEvent], None] | None = None,
                 hide: Callable[[str], bool] | None = None) -> None:
        super().__init__(name, log_path=log_path, stream=stream, lock=lock, on_event=on_event, hide=hide)
        self.make_actor = make_actor
        self.actor = make_actor()
        self.start_timeout = start_timeout
        self.node_id: str | None = None
        self.ip: str | None = None
        self.port: int | None = None
        self.actor_restarts = 0
        self._death_noted = False  # the log already says this actor died (by the reader or a failed start)
        self._actor_id: tuple[str, int] | None = None  # (node id, pid) of the actor process last seen
        self._seen: int | None = None      # the exit code the reader saw for the current run
        self._lost = False                 # the actor died under the current run
        self._restarts_noted = 0           # actor restarts the task log already tells of
        self.port_lost: str | None = None  # another user listened on its port (its actor's ``PortWatch``)
        self.proc = _Waiter(self)

    # ---- placement ----------------------------------------------------------------
    def locate(self, port: int = 0) -> str:
        """Where the task will listen: the actor's node address and a port it reserved there.

        An actor that died is awaited first (Ray restarts it when ``max_restarts``
        allows), or replaced by a new one in its bundle.
        """
        where = self._await_actor()
        old, self.node_id, self.ip = self.ip, where["node_id"], where["ip"]
        self.port = ray.get(self.actor.reserve.remote(port), timeout=_CALL_TIMEOUT)
        if port and old not in (None, self.ip):
            logger.warning("%s came back on another host (%s, was %s); its TF_CONFIG address is stale, so the "
                           "coordinator will not use it until the cluster restarts", self.name, self.ip, old)
        return f"{self.ip}:{self.port}"

    def _await_actor(self) -> dict[str, Any]:
        """The actor's ``where()``, once it answers; counts a restart when its process changed.

        The process, not the path that noticed the death, decides: when Ray kills an
        actor, the task's exit can reach the reader before the actor's own death does.
        """
        started = time.monotonic()
        deadline = started + self.start_timeout
        while True:
            try:
                where: dict[str, Any] = ray.get(self.actor.where.remote(), timeout=_CALL_TIMEOUT)
                break
            except ray.exceptions.ActorDiedError:
                if time.monotonic() > deadline:
                    raise
                if time.monotonic() - started < _DIED_GRACE:  # Ray may be about to restart it
                    time.sleep(0.5)
                    continue
                logger.warning("%s: its actor is gone for good; starting a new one in its bundle", self.name)
                self.actor = self.make_actor()
                started = time.monotonic() - _DIED_GRACE  # a new actor that dies is not waited for again
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                    ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        actor_id = (str(where["node_id"]), int(where["pid"]))
        if self._actor_id is not None and actor_id != self._actor_id:
            self.actor_restarts += 1
        self._actor_id, self._lost = actor_id, False
        return where

    # ---- the TaskProcess surface ----------------------------------------------------
    def start(self, cmd: Sequence[str], env: Mapping[str, str], *, cwd: str | os.PathLike[str] | None = None,
              fork: object = None) -> None:
        """Starts (or restarts) the task in its actor (in ``cwd`` on its node); a dead actor is revived first.

        ``fork`` is the local launcher's (``TaskProcess.start``); an actor starts its own interpreter, so
        ``launch_ray`` refuses ``preload`` and there is never one here.
        """
        if fork is not None:
            raise ValueError("a Ray task runs in its actor and cannot be forked from a local preload process")
        log = open(self.log_path, "ab")  # noqa: SIM115 - the output pump closes it when the task ends
        if self.starts:
            log.write(f"----- {self.name} restarted (start #{self.starts + 1}) -----\n".encode())
        # The reader (or a failed start) already wrote why. A flag, not ``_seen == ACTOR_LOST``: a task
        # killed by SIGKILL inside a live actor exits with the same code and leaves no note.
        death_logged, self._death_noted = self._death_noted, False
        self.exit_code = self.ended_at = self._seen = None
        self.handled = self.stopped = False
        self.starts += 1
        try:
            if self.starts > 1 or self._lost:  # a worker restarted alone keeps its address: its node, its port
                self.locate(self.port or 0)
                # The restart may have been seen before this start (e.g. by the job's placement refresh):
                # compare with what the log already tells, not with the count on entry.
                if self.actor_restarts > self._restarts_noted and not death_logged:
                    log.write(f"----- {self.name}: its Ray actor died; Ray restarted it -----\n".encode())
            self._restarts_noted = self.actor_restarts
            log.flush()  # the notes reach the file now, not when the new run's first output is read
            self.pid, cursor = ray.get(self.actor.start.remote(list(cmd), armed_env(env), sys.executable,
                                                            None if cwd is None else os.fspath(cwd)),
                                       timeout=self.start_timeout)
        except (ray.exceptions.RayError, OSError) as exc:
            self._lost = True
            log.write(f"----- {self.name} could not start on Ray: {exc} -----\n".encode())
            log.close()
            self._seen, self._death_noted = ACTOR_LOST, True
            self.reader = None
            self._emit(EventKind.STARTED)
            return
        self.reader = threading.Thread(target=self._pump, args=(self.actor, cursor, log), daemon=True,
                                       name=f"tfdist-ray-{self.name}")
        self.reader.start()
        logger.info("started %s on node %s (%s, pid %s)", self.name, (self.node_id or "?")[:12], self.ip, self.pid)
        self._emit(EventKind.STARTED)

    def _pump(self, actor: Any, cursor: int, log: IO[bytes]) -> None:
        with log:
            while True:
                try:
                    lines, cursor, code = ray.get(actor.read.remote(cursor, 1.0), timeout=_CALL_TIMEOUT)
                except ray.exceptions.GetTimeoutError:
                    continue
                except ray.exceptions.RayError as exc:
                    self._lost = True
                    code, note = death_of(self.name, exc)
                    log.write((note + "\n").encode())
                    self.recent.append(note)
                    self._seen, self._death_noted = code, True
                    return
                for line in lines:
                    if line.startswith(PORT_LOST):
                        self.port_lost = line[len(PORT_LOST):]
                    log.write((line + "\n").encode())
                    self._show(line)
                log.flush()
                if code is not None:
                    self._seen = code
                    return

    def poll(self) -> int | None:
        if self.starts == 0:
            return None
        if self.exit_code is None and self._seen is not None:
            if self.reader is not None:
                self.reader.join(5.0)
            self.exit_code, self.ended_at = self._seen, time.monotonic()
            self._emit(EventKind.EXITED)
        return self.exit_code

    @property
    def running(self) -> bool:
        return self.starts > 0 and self.poll() is None

    def signal_group(self, sig: int) -> bool:
        if self._lost:
            return False
        try:
            return bool(ray.get(self.actor.stop.remote(int(sig)), timeout=_CALL_TIMEOUT))
        except ray.exceptions.RayError:
            return False

    def kill_actor(self) -> None:
        """Ends the actor for good (and, by ``PR_SET_PDEATHSIG``, anything it still ran)."""
        try:
            ray.kill(self.actor, no_restart=True)
        except ray.exceptions.RayError as exc:
            logger.debug("killing %s's actor: %s", self.name, exc)
