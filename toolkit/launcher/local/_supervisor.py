"""The launcher's control loop: start every task, watch them, carry out the ``FailurePolicy``'s decisions.

The policy itself (``_policy``, docs/launcher.md) decides; this loop only acts:
- The job ends when the chief ends; the other tasks get ``grace_period``
  seconds to exit by themselves (servers do, on the chief's goodbye), then
  their process groups are stopped.
- A SIGTERM to the launcher itself (its machine is being taken away) is passed
  on to every task unmarked, so each checkpoints and exits 143; the launcher
  waits up to the preemption grace (``TFDIST_PREEMPTION_GRACE`` + 2 s) before
  stopping what is left, and exits 143.
- Before the launcher itself SIGTERMs a task (to restart the cluster, or at
  the job's end) it writes ``STOP_MARKER`` into the task's directory, so the
  task's preemption handler knows the signal is no preemption and exits at once.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from toolkit._owned import open_append, owned_dir, write_new
from toolkit.hypertune import task_environment
from toolkit.launcher._console import console_filter
from toolkit.launcher._policy import Decision, FailurePolicy, Outcome, TaskEnd, TaskExit, judge_success
from toolkit.launcher._portwatch import PortWatch, foreign_message, killer, privileged_hosts
from toolkit.launcher._result import (
    EXIT_PREEMPTED,
    EXIT_TASK_FAILED,
    EXIT_TIMEOUT,
    Reason,
    SuccessPolicy,
    TaskEvent,
    TaskResult,
)
from toolkit.launcher._rotate import clear_rotated
from toolkit.launcher._signal_dir import make_signal_dir
from toolkit.launcher._spec import (
    ENV_JOB_DIR,
    ENV_JOB_NONCE,
    ENV_RESTART_COUNT,
    ENV_TASK_DIR,
    ENV_TASK_NAME,
    LaunchError,
    LaunchSpec,
)
from toolkit.launcher._task import (
    TaskProcess,
    describe_exit,
    die_with_parent,
    preemption_grace,
    shell_exit_code,
    stop_all,
)
from toolkit.launcher.local._preload import ForkedTask, Preloader, PreloadError

if TYPE_CHECKING:
    from tf_config import TFConfig

logger = logging.getLogger(__name__)

_POLL = 0.2
_TAIL_CHARS = 500  # of each log line quoted in a failure message
#: written into a task's directory just before the launcher SIGTERMs it (``strategies._server_preemption`` reads it)
STOP_MARKER = "stop-requested"


def generate_configs(spec: LaunchSpec, job_dir: Path, *, hosts: Sequence[str] | None = None) -> dict[str, TFConfig]:
    """Every task's TF_CONFIG in the spec's dialect, by task name; the cluster goes to ``cluster.json``."""
    from tf_config import generate

    dialect = spec.tf_dialect
    assert spec.chief is not None  # LaunchSpec.__post_init__ resolved it
    configs = [dialect.apply(cfg) for cfg in generate(chief=spec.chief, workers=spec.workers, ps=spec.ps,
                                                      evaluator=spec.evaluator, dialect="tf2", hosts=hosts)]
    cluster = {job: list(addrs) for job, addrs in configs[0].cluster.items()}
    write_new(job_dir / "cluster.json", json.dumps({"cluster": cluster}, indent=2) + "\n")  # 0600, no symlink
    return {str(cfg.task): cfg for cfg in configs}


class Job:
    """One launch: its tasks, their TF_CONFIGs, restarts and the deaths seen so far."""

    preloader: Preloader | None = None  # the process the tasks are forked from (``LaunchSpec.preload``)
    preload_starts = 0
    signal_dir: str | None = None  # made by this job (removed at its end); None: the environment named one
    watch_ports = False  # local tasks outside a private network namespace: another user could take a port
    port_watch: PortWatch | None = None

    def __init__(self, spec: LaunchSpec, job_dir: Path, *, env: Mapping[str, str] | None,
                 stream: IO[str] | None, on_task: Callable[[TaskEvent], None] | None = None,
                 verbose: bool = False, wrap: Callable[[Sequence[str]], list[str]] | None = None) -> None:
        self.spec, self.job_dir = spec, job_dir
        self.policy = FailurePolicy.of(spec)
        self.base_env = {**os.environ, **(env or {})}
        self.signal_dir = make_signal_dir(self.base_env)  # private: no other user can create it first
        self.wrap = wrap  # runs a task's command inside the private network namespace, if any
        self.watch_ports = wrap is None
        self.configs = self._generate()
        self._add_tasks(self.configs, TaskProcess, stream=stream, on_task=on_task, verbose=verbose)
        self._ready()

    def _add_tasks(self, names: Iterable[str], make: Callable[..., Any], *, stream: IO[str] | None,
                   on_task: Callable[[TaskEvent], None] | None, verbose: bool) -> None:
        """Makes each task (one console lock, a noise filter each), its log file emptied and its directory made."""
        # one per job, shared by its tasks and kept across restarts: their goodbye files are per job
        self.base_env.setdefault(ENV_JOB_NONCE, secrets.token_hex(8))
        noise = console_filter(self.base_env, verbose=verbose)
        lock = threading.Lock()
        owned_dir(self.job_dir / "logs", what="the job's logs directory", mode=0o777)
        self.tasks: dict[str, TaskProcess] = {}
        for name in names:
            task = self.tasks[name] = make(name, log_path=self.job_dir / "logs" / f"{name}.log", stream=stream,
                                           lock=lock, on_event=on_task, hide=noise() if noise is not None else None)
            task.log_limit, task.log_backups = self.spec.max_log_bytes, self.spec.log_backups
            owned_dir(self.job_dir / "tasks", what="the job's tasks directory", mode=0o777)
            owned_dir(self.job_dir / "tasks" / name, what=f"{name}'s task directory", mode=0o777)
            os.close(open_append(task.log_path, truncate=True))
            clear_rotated(task.log_path)

    def _ready(self) -> None:
        """The chief, and the job's restart and preemption counts at zero (every kind of job keeps them)."""
        self.chief = next(self.tasks[n] for n, c in self.configs.items() if c.is_chief and not c.is_evaluator)
        self.task_restarts = dict.fromkeys(self.tasks, 0)  # after failures (the max_restarts budget)
        self.task_preemptions = dict.fromkeys(self.tasks, 0)
        self.cluster_restarts = 0
        self.failure_cluster_restarts = 0
        self.preemptions = 0  # acted on, over the whole job (the max_preemptions budget)
        self.failures = 0
        self.deaths: list[tuple[str, int | None, list[str]]] = []  # (task, code, log tail) of this cluster run
        self.signal: int | None = None
        self.preempted = False  # the launcher itself got SIGTERM: its tasks are told, unmarked

    # ---- preloading -------------------------------------------------------------
    def _fork(self) -> Callable[[Mapping[str, str]], ForkedTask] | None:
        """How to fork a task from the preload process (started, or started again, here); None: no preload.

        Raises:
            LaunchError: the preload process could not import its modules before the first task started.
        """
        if not self.spec.preload:
            return None
        if self.preloader is not None and not self.preloader.alive:
            logger.warning("the preload process has exited; starting a new one")
            self.close()
        if self.preloader is None:
            again, self.preload_starts = self.preload_starts > 0, self.preload_starts + 1
            try:
                self.preloader = Preloader(self.spec.preload, env=self.base_env, cwd=self.spec.cwd,
                                           log_path=self.job_dir / "logs" / "preload.log", wrap=self.wrap,
                                           preexec=die_with_parent())
            except PreloadError as exc:
                if not again:
                    raise LaunchError(f"`preload` failed, so no task was started: {exc} (the whole output is in "
                                      f"{self.job_dir / 'logs' / 'preload.log'}). Name modules this interpreter can "
                                      "import; without `preload`, every task starts as a fresh interpreter.",
                                      field="preload") from exc
                logger.warning("could not start the preload process again (%s); tasks start as fresh interpreters",
                               exc)
                return None
        preloader, argv, cwd = self.preloader, self.spec.cmd[1:], self.spec.cwd
        return lambda env: preloader.spawn(argv, env, cwd, name=env.get(ENV_TASK_NAME))

    def close(self) -> None:
        """Ends what outlives the tasks: the preload process."""
        if self.preloader is not None:
            self.preloader.close()
            self.preloader = None

    def remove_signal_dir(self) -> None:
        """Removes the job's own signal directory (``Job.__init__``), once every task is gone."""
        if self.signal_dir is not None:
            shutil.rmtree(self.signal_dir, ignore_errors=True)

    # ---- cluster ----------------------------------------------------------------
    def _generate(self) -> dict[str, TFConfig]:
        count = (self.spec.chief or 0) + self.spec.workers + self.spec.ps + self.spec.evaluator
        return generate_configs(self.spec, self.job_dir, hosts=privileged_hosts(count) if self.watch_ports else None)

    def _env(self, task: TaskProcess) -> dict[str, str]:
        config = self.configs[task.name]
        return {
            **task_environment(self.base_env, task.name, is_chief=config.is_chief),
            "TF_CONFIG": config.to_json(),
            ENV_JOB_DIR: str(self.job_dir),
            ENV_TASK_DIR: str(self.job_dir / "tasks" / task.name),
            ENV_TASK_NAME: task.name,
            ENV_RESTART_COUNT: str(task.starts),
            "PYTHONUNBUFFERED": "1",
        }

    @property
    def cmd(self) -> Sequence[str]:
        return self.spec.cmd if self.wrap is None else self.wrap(self.spec.cmd)

    def _marker(self, task: TaskProcess) -> Path:
        return self.job_dir / "tasks" / task.name / STOP_MARKER

    def _start(self, task: TaskProcess, fork: Callable[[Mapping[str, str]], ForkedTask] | None) -> None:
        if self.port_watch is not None:
            self.port_watch.rebind(task.name)
        self._marker(task).unlink(missing_ok=True)
        task.start(self.cmd, self._env(task), cwd=self.spec.cwd, fork=fork)

    def stop(self, tasks: Sequence[TaskProcess]) -> None:
        """SIGTERMs (then SIGKILLs) ``tasks``, each told first that this is the launcher, not a preemption."""
        for task in tasks:
            if task.running:
                with contextlib.suppress(OSError):
                    write_new(self._marker(task), "the launcher stops this task\n")
        stop_all(list(tasks))

    def start_all(self) -> None:
        fork = self._fork()
        if self.watch_ports:  # from before the first task starts, until the job ends (_portwatch)
            if self.port_watch is not None:
                self.port_watch.stop()
            self.port_watch = PortWatch({int(c.address.rpartition(":")[2]): name for name, c in self.configs.items()
                                         if c.address}, killer(self.tasks.values))
            if self.port_watch.start().lost is not None:
                return  # another user listens on a port already: no task starts, and check() fails the job
        for task in self.tasks.values():
            self._start(task, fork)

    def _budget(self, preempted: bool) -> str:
        if preempted:
            return f"preemption {self.preemptions} of {self.policy.max_preemptions}"
        return f"{self.failures} of {self.spec.max_restarts}"

    def _restart_task(self, task: TaskProcess, *, preempted: bool = False) -> None:
        if preempted:
            self.preemptions += 1
            self.task_preemptions[task.name] += 1
            logger.warning("%s was preempted (%s); restarting it (%s)", task.name, describe_exit(task.exit_code),
                           self._budget(True))
        else:
            self.failures += 1
            self.task_restarts[task.name] += 1
            logger.warning("%s exited with %s; restarting it (%d of %d)", task.name, describe_exit(task.exit_code),
                           self.task_restarts[task.name], self.spec.max_restarts)
        self._start(task, self._fork())

    def _restart_cluster(self, cause: TaskProcess, *, preempted: bool = False) -> None:
        self.cluster_restarts += 1
        if preempted:
            self.preemptions += 1
            self.task_preemptions[cause.name] += 1
            logger.warning("%s was preempted (%s); restarting the whole cluster (%s) so it resumes from its "
                           "checkpoint", cause.name, describe_exit(cause.exit_code), self._budget(True))
        else:
            self.failures += 1
            self.failure_cluster_restarts += 1
            logger.warning("%s exited with %s; restarting the whole cluster (%d of %d) so it resumes from its "
                           "last checkpoint", cause.name, describe_exit(cause.exit_code),
                           self.failure_cluster_restarts, self.spec.max_restarts)
        self.stop(list(self.tasks.values()))
        for task in self.tasks.values():
            task.join_output(5.0)
        self.configs = self._generate()
        self.deaths = []
        self.start_all()

    # ---- policy -----------------------------------------------------------------
    def _note_death(self, task: TaskProcess) -> None:
        if not any(name == task.name for name, _, _ in self.deaths):
            self.deaths.append((task.name, task.exit_code, task.tail()))

    def _failure_text(self, headline: str) -> str:
        name, code, tail = self.deaths[0]
        first = "" if name in headline else f" The first task to fail was {name}, with {describe_exit(code)}."
        log = self.tasks[name].log_path
        lines = "\n".join(f"  {line[:_TAIL_CHARS]}" + ("..." if len(line) > _TAIL_CHARS else "")
                          for line in tail) or "  (no output)"
        return f"{headline}.{first} Last lines of {name}'s log ({log}):\n{lines}"

    def _act(self, task: TaskProcess, now: float) -> Outcome | None:
        """Carries out the policy's decision about ``task``'s exit; an outcome once the job is over."""
        if task.exit_code is None or task.ended_at is None:  # still running: nothing to decide
            return None
        ended = TaskExit(task_type=task.task_type, is_chief=task is self.chief, exit_code=task.exit_code,
                         seconds_since_exit=now - task.ended_at, task_restarts=self.task_restarts[task.name],
                         cluster_restarts=self.failure_cluster_restarts, preemptions=self.preemptions)
        decision = self.policy.decide(ended)
        if task.exit_code != 0 and decision is not Decision.IGNORE:
            self._note_death(task)
        if decision is Decision.WAIT:
            return None  # maybe the chief told it to go and is about to end the job itself
        task.handled = True
        if decision is Decision.FINISH:
            return Outcome(0, Reason.SUCCEEDED, f"the chief ({task.name}) exited with code 0")
        if decision is Decision.IGNORE:
            log = logger.info if task.exit_code == 0 else logger.warning
            log("%s exited with %s", task.name, describe_exit(task.exit_code))
        elif decision is Decision.RESTART_TASK:
            self._restart_task(task, preempted=ended.preempted)
        elif decision is Decision.RESTART_CLUSTER:
            self._restart_cluster(task, preempted=ended.preempted)
        elif decision is Decision.PREEMPTED:
            self.preemptions += 1
            self.task_preemptions[task.name] += 1
            headline = f"{task.name} exited with {describe_exit(task.exit_code)} and {self.policy.explain(ended)}"
            return Outcome(EXIT_PREEMPTED, Reason.PREEMPTED, self._failure_text(headline))
        elif task is self.chief:
            self.failures += 1
            headline = f"the chief ({task.name}) exited with {describe_exit(task.exit_code)}"
            return Outcome(shell_exit_code(task.exit_code), Reason.FAILED, self._failure_text(headline))
        else:
            self.failures += 1
            headline = f"{task.name} exited with {describe_exit(task.exit_code)} and {self.policy.explain(ended)}"
            return Outcome(EXIT_TASK_FAILED, Reason.FAILED, self._failure_text(headline))
        return None

    def check(self, deadline: float | None) -> Outcome | None:
        """One look at every task; an outcome once the job is over."""
        now = time.monotonic()
        if self.signal is not None:
            name = signal.Signals(self.signal).name
            how = ("every task was told to checkpoint and exit (a preemption), then stopped" if self.preempted
                   else "every task was stopped")
            return Outcome(128 + self.signal, Reason.INTERRUPTED, f"interrupted by {name}; {how}")
        taken = self._ports_taken(now)
        if taken is not None:
            return taken
        if deadline is not None and now >= deadline:
            return Outcome(EXIT_TIMEOUT, Reason.TIMEOUT,
                           f"the job ran past its timeout of {self.spec.timeout:g} s; every task was stopped")
        if self.chief.poll() is not None:
            if self._awaiting_workers(now):
                return None
            return self._act(self.chief, now)
        for task in self.tasks.values():
            if task is not self.chief and not task.handled and task.poll() is not None:
                outcome = self._act(task, now)
                if outcome is not None:
                    return outcome
        return None

    def _ports_taken(self, now: float) -> Outcome | None:
        """Without a network namespace: a failure once another user listens on one of the job's ports
        (``_portwatch``: its thread has stopped every task already)."""
        lost = self.port_watch.lost if self.port_watch is not None else None
        if lost is None:
            return None
        self.failures += 1
        return Outcome(EXIT_TASK_FAILED, Reason.FAILED, foreign_message(*lost))

    def _awaiting_workers(self, now: float) -> bool:
        """Under ``SuccessPolicy.ALL_WORKERS``, a chief that exited 0 waits (``grace_period``) for the workers."""
        if self.spec.success_policy is not SuccessPolicy.ALL_WORKERS or self.chief.exit_code != 0:
            return False
        assert self.chief.ended_at is not None
        workers = [t for t in self.tasks.values() if t is not self.chief and t.task_type == "worker"]
        return any(t.running for t in workers) and now - self.chief.ended_at < self.spec.grace_period

    def judge_success(self, outcome: Outcome) -> Outcome:
        """``_policy.judge_success`` over every task, once every process is gone."""
        judged = judge_success(outcome, [TaskEnd(t.name, t.task_type, t.exit_code, t.stopped)
                                         for t in self.tasks.values()], self.spec.success_policy)
        self.failures += judged.reason is not outcome.reason
        return judged

    def wind_down(self, grace: float) -> None:
        """Lets the other tasks exit by themselves for ``grace`` s, then stops every process group."""
        deadline = time.monotonic() + grace
        while (any(t.running for t in self.tasks.values()) and time.monotonic() < deadline
               and self.signal is None):
            time.sleep(_POLL)
        self.stop(list(self.tasks.values()))
        for task in self.tasks.values():
            task.join_output(5.0)
        if self.port_watch is not None:
            self.port_watch.stop()

    def pass_on_preemption(self) -> None:
        """Sends SIGTERM to every running task, unmarked, and waits up to ``preemption_grace`` for them to exit."""
        running = [t for t in self.tasks.values() if t.running]
        wait = preemption_grace(self.base_env)  # checked when the launch began (launch, launch_ray)
        logger.warning("SIGTERM: passing the preemption on to %s; waiting up to %g s for their checkpoint",
                       ", ".join(t.name for t in running) or "no task", wait)
        for task in running:
            task.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + wait
        while any(t.running for t in running) and time.monotonic() < deadline:
            time.sleep(_POLL)

    def results(self) -> tuple[TaskResult, ...]:
        return tuple(
            TaskResult(name=t.name, task_type=t.task_type, index=t.index, exit_code=t.exit_code,
                       restarts=t.starts - 1, stopped=t.stopped, log_path=t.log_path,
                       preemptions=self.task_preemptions[t.name], log_problem=t.log_problem)
            for t in self.tasks.values()
        )
