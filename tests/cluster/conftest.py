"""Fixtures for cluster tests: the training scripts, and tasks started by hand.

Cluster tests start real TensorFlow processes on 127.0.0.1. They must clean up
after themselves whatever happens, so every process started here runs in its
own process group and is killed (group and all) when the test ends.

``forked_hand_cluster`` starts the same tasks by hand, but forks each from one
process that imported TensorFlow once per session (the launcher's preload process,
``toolkit.launcher.local._preload``): a task still runs ``python SCRIPT ARGS`` with its
own TF_CONFIG, session and exit code, without a TensorFlow import of its own.
``hand_cluster`` keeps fresh interpreters.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest


@pytest.fixture
def quiet_tf(monkeypatch):
    """Less TensorFlow C++ chatter in task logs (inherited by launched tasks)."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


class _ForkedProc:
    """A task forked from the preload process, with the part of ``subprocess.Popen`` the tests use.

    A thread copies the task's output pipe to its log file as it comes.
    """

    def __init__(self, task, log_path: Path) -> None:
        self._task = task
        self.pid = task.pid
        log = open(log_path, "wb", buffering=0)  # noqa: SIM115 - there from the start; the pump closes it
        self._pump = threading.Thread(target=self._copy, args=(log,), daemon=True)
        self._pump.start()

    def _copy(self, log) -> None:
        with self._task.stdout as pipe, log:
            while chunk := pipe.read1(65536):
                log.write(chunk)

    @property
    def returncode(self) -> int | None:
        return self._task.returncode

    def poll(self) -> int | None:
        code = self._task.poll()
        if code is not None:
            self._pump.join(5)  # as in wait: an ended task's last lines are in its log before anyone reads it
        return code

    def wait(self, timeout: float | None = None) -> int:
        code = self._task.wait(timeout)
        self._pump.join(5)  # the task's last lines are in its log once it has ended
        return code

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)


class HandCluster:
    """Tasks started one by one, as a user would in separate terminals (no launcher).

    With a ``preloader`` (``toolkit.launcher.local._preload.Preloader``), every task is forked
    from that process rather than started as a fresh interpreter.
    """

    def __init__(self, log_dir: Path, preloader=None) -> None:
        self.log_dir = log_dir
        self.preloader = preloader
        self.procs: dict[str, subprocess.Popen | _ForkedProc] = {}
        self.ended: dict[str, tuple[int, float]] = {}  # name -> (exit code, monotonic end time)

    def start(self, name: str, cmd: list[str], tf_config_json: str | None = None) -> None:
        """Runs ``python CMD`` as task ``name``, with ``tf_config_json`` exported as TF_CONFIG if given."""
        env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        if tf_config_json is not None:
            env["TF_CONFIG"] = tf_config_json
        if self.preloader is not None:
            task = self.preloader.spawn(cmd, env, None, name=name)
            self.procs[name] = _ForkedProc(task, self.log_dir / f"{name}.log")
            return
        with open(self.log_dir / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([sys.executable, *cmd], env=env, stdout=log,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def wait(self, timeout: float) -> dict[str, tuple[int, float]]:
        """Waits for every task to exit by itself; records when each one did."""
        deadline = time.monotonic() + timeout
        while len(self.ended) < len(self.procs) and time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if name not in self.ended and proc.poll() is not None:
                    self.ended[name] = (proc.returncode, time.monotonic())
            time.sleep(0.1)
        return dict(self.ended)

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def kill_all(self) -> None:
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for proc in self.procs.values():
            proc.wait(timeout=30)


@pytest.fixture
def hand_cluster(tmp_path):
    """Tasks started by hand, each a fresh interpreter."""
    cluster = HandCluster(tmp_path)
    yield cluster
    cluster.kill_all()


class _SharedPreloader:
    """One preload process per test session (per xdist worker); started again if it died."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.preloader = None

    def get(self):
        from toolkit.launcher.local._preload import Preloader

        if self.preloader is None or not self.preloader.alive:
            # what quiet_tf gives launched tasks: the log level acts when TensorFlow is imported, here
            env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
            env.update(PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
            self.preloader = Preloader(("tensorflow", "keras"), env=env, cwd=None,
                                       log_path=self.log_dir / "preload.log")
        return self.preloader

    def close(self) -> None:
        if self.preloader is not None:
            self.preloader.close()


@pytest.fixture(scope="session")
def _shared_preloader(tmp_path_factory):
    shared = _SharedPreloader(tmp_path_factory.mktemp("preload"))
    shared.get()  # now, before the first test's no_orphans takes its list of processes
    yield shared
    shared.close()


@pytest.fixture
def forked_hand_cluster(_shared_preloader, no_orphans, tmp_path):
    """Tasks started by hand, each forked from a process that imported TensorFlow and Keras once.

    That process serves the whole session (started before ``no_orphans`` looks, so it is no
    leftover); its tasks must end with their test like any other. TensorFlow's C++ log level
    is 2 in them (as ``quiet_tf`` sets it), since it was read at that import.
    """
    cluster = HandCluster(tmp_path, preloader=_shared_preloader.get())
    yield cluster
    cluster.kill_all()
