"""One task's process: started in its own process group, its output prefixed and teed.

Each task runs in a new session (``start_new_session=True``), so the task and
everything it spawns form one process group that can be signalled as a whole:
stopping a task never leaves a grandchild behind. If the launcher itself is
SIGKILLed, the kernel kills every task too (a parent-death signal).
"""
from __future__ import annotations

import collections
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from toolkit.launcher._lines import CHUNK, LineCutter, LogSink
from toolkit.launcher._result import EventKind, TaskEvent
from toolkit.launcher._rotate import open_log
from toolkit.launcher.local._preload import ForkedTask, PreloadError

logger = logging.getLogger(__name__)

_TAIL_LINES = 20


def describe_exit(code: int | None) -> str:
    """``1`` -> "code 1"; ``-9`` -> "signal SIGKILL (-9)"; ``None`` -> "no exit code yet"."""
    if code is None:
        return "no exit code yet"
    if code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name} ({code})"
    except ValueError:
        return f"signal {-code} ({code})"


def shell_exit_code(code: int) -> int:
    """A Popen return code as a shell reports it: death by signal N is 128 + N."""
    return 128 - code if code < 0 else code


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_HOOKS = str(Path(__file__).with_name("_hooks"))


def armed_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the launcher's ``sitecustomize`` leading PYTHONPATH (``toolkit/launcher/_hooks``).

    So a task's script that builds its ParameterServerStrategy by hand, or ends
    with TensorFlow's ``server.join()``, still ends with the job
    (``strategies._hand_built``).
    """
    from strategies._hand_built import ENV_HAND_BUILT

    paths = env.get("PYTHONPATH", "")
    if paths.split(os.pathsep)[0] != _HOOKS:
        paths = os.pathsep.join([_HOOKS, paths]) if paths else _HOOKS
    return {**env, "PYTHONPATH": paths, ENV_HAND_BUILT: "1"}


#: what a preempted task gets beyond its grace (``ServeOptions.preemption_grace``) to exit
EXIT_ALLOWANCE = 2.0


def preemption_grace(env: Mapping[str, str]) -> float:
    """How long a launcher waits for a task it passed a SIGTERM on to: the task's grace, plus time to exit.

    Raises:
        StrategyError: ``TFDIST_PREEMPTION_GRACE`` (or ``_SIGNAL``) is no valid value; the tasks would refuse it too.
    """
    from strategies._serve_options import ServeOptions

    return ServeOptions.from_env(env).preemption_grace + EXIT_ALLOWANCE


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the task when the launcher dies (Linux).

    A task runs in its own session, so nothing else would stop it if the
    launcher were SIGKILLed: the task's group cleanup never runs. With the
    parent-death signal every task dies with the launcher; the grandchildren
    a task started are caught by the servers' chief watch or their own
    parent-death handling. The signal follows the *thread* that started the
    child, and tasks are started from the launcher's supervising thread,
    which lives as long as the job. Elsewhere (macOS) nothing is set.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    except (OSError, AttributeError):
        logger.warning("prctl is unavailable; tasks will not die with the launcher if it is killed")
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os._exit(1)

    return preexec


class TaskBase:
    """What the control loop reads of a task, wherever it runs (a local process, or a Ray actor's)."""

    pid: int | None = None

    def __init__(self, name: str, *, log_path: Path, stream: IO[str] | None, lock: threading.Lock,
                 on_event: Callable[[TaskEvent], None] | None = None,
                 hide: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.hide = hide  # lines kept off the console (the log file still gets them)
        self.on_event = on_event
        self.task_type, _, index = name.rpartition("-")
        self.index = int(index)
        self.log_path = log_path
        self.stream = stream
        self.lock = lock
        self.reader: threading.Thread | None = None
        self.starts = 0
        self.exit_code: int | None = None
        self.ended_at: float | None = None
        self.handled = False   # its exit has been acted on (restart, accepted, or failure)
        self.stopped = False   # the launcher had to signal it
        self.recent: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self.log_limit: int | None = None  # bytes of output a run keeps in the log file (None: all)
        self.log_problem: str | None = None  # its log could not keep everything (a full disk, the cap)
        self.log_backups = 0  # with ``log_limit``: rotated files kept (``_rotate``), else the log stops at the cap

    def _emit(self, kind: EventKind) -> None:
        if self.on_event is None:
            return
        event = TaskEvent(name=self.name, kind=kind, pid=self.pid or 0, restarts=self.starts - 1,
                          exit_code=self.exit_code, log_path=self.log_path)
        try:
            self.on_event(event)
        except Exception:  # an observer's bug must not take the cluster down with it
            logger.exception("the on_task callback failed on %s %s", self.name, kind)

    def _show(self, line: str) -> None:
        """Keeps ``line`` for the tail and echoes it, prefixed, unless it is noise kept off the console."""
        self.recent.append(line)
        if self.stream is not None and not (self.hide is not None and self.hide(line)):
            self._echo(f"[{self.name}] {line}\n")

    def _echo(self, text: str) -> None:
        """Shows a line on the console; a console that went away (closed pipe) only loses the echo."""
        with self.lock:
            if self.stream is None:
                return
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError) as exc:
                logger.warning("console output of %s stopped (%s); its log file still has everything",
                               self.name, exc)
                self.stream = None

    def join_output(self, timeout: float) -> None:
        """Waits for the output pump to drain (the pipe closes when the group is gone)."""
        if self.reader is not None:
            self.reader.join(timeout)

    def tail(self) -> list[str]:
        """The last lines this task printed (its current run)."""
        return list(self.recent)


class TaskProcess(TaskBase):
    """A task of the local cluster, restartable with the same name and log file."""

    proc: subprocess.Popen[bytes] | ForkedTask | None = None

    def start(self, cmd: Sequence[str], env: Mapping[str, str], *, cwd: str | os.PathLike[str] | None = None,
              fork: Callable[[Mapping[str, str]], ForkedTask] | None = None) -> None:
        """Starts (or restarts) the task in ``cwd``; output goes to the console and the log file.

        With ``fork`` (the job's preload process), the task is forked from it with ``env``;
        should that fail, it starts as ``cmd`` in a fresh interpreter instead.
        """
        env = armed_env(env)
        log = open_log(self.log_path, max_bytes=self.log_limit, backups=self.log_backups)
        if self.starts:
            log.write(f"----- {self.name} restarted (start #{self.starts + 1}) -----\n".encode())
        self.proc = None
        if fork is not None:
            try:
                self.proc = fork(env)
            except PreloadError as exc:
                logger.warning("%s could not be forked from the preload process (%s); starting it as a fresh "
                               "interpreter", self.name, exc)
        if self.proc is None:
            self.proc = subprocess.Popen(
                list(cmd), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - only prctl and getppid run in the child
            )
        self.starts += 1
        self.pid = self.proc.pid
        self.exit_code = self.ended_at = None
        self.handled = self.stopped = False
        self.reader = threading.Thread(target=self._pump, args=(self.proc, log), daemon=True,
                                       name=f"tfdist-launch-{self.name}")
        self.reader.start()
        logger.info("started %s (pid %d)", self.name, self.proc.pid)
        self._emit(EventKind.STARTED)

    def _pump(self, proc: subprocess.Popen[bytes] | ForkedTask, log: LogSink) -> None:
        """Drains the task's output in bounded chunks into its log and the console (``_lines``)."""
        assert proc.stdout is not None  # started with stdout=PIPE
        lines = LineCutter()
        fd = proc.stdout.fileno()
        try:
            while chunk := os.read(fd, CHUNK):
                log.write(chunk)
                for line in lines.feed(chunk):
                    self._show(line)
            for line in lines.close():
                self._show(line)
        finally:
            log.close()
            proc.stdout.close()
            self.log_problem = log.problem() or self.log_problem

    def poll(self) -> int | None:
        """The exit code once the process has ended (cached), else None."""
        if self.proc is None:
            return None
        if self.exit_code is None and self.proc.poll() is not None:
            self.exit_code, self.ended_at = self.proc.returncode, time.monotonic()
            self._emit(EventKind.EXITED)
        return self.exit_code

    @property
    def running(self) -> bool:
        return self.proc is not None and self.poll() is None

    def signal_group(self, sig: int) -> bool:
        """Sends ``sig`` to the task's whole process group; False if nothing was left to signal."""
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def stop_all(tasks: Sequence[TaskProcess], *, kill_after: float = 5.0) -> None:
    """SIGTERM every task's process group, then SIGKILL whatever is left after ``kill_after`` s.

    Groups of tasks that already exited are signalled too, so that their
    leftover children go with them.
    """
    for task in tasks:
        if task.running:
            task.stopped = True
        task.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + kill_after
    while any(t.running for t in tasks) and time.monotonic() < deadline:
        time.sleep(0.1)
    for task in tasks:
        if task.running:
            logger.warning("%s did not stop within %.0f s of SIGTERM; killing it", task.name, kill_after)
        task.signal_group(signal.SIGKILL)  # also takes any child that ignored SIGTERM
        if task.proc is not None:
            task.proc.wait(timeout=kill_after)
            task.poll()
