"""Preemption: a SIGTERM to any task checkpoints at the next step, and the job resumes exactly there.

Machines are taken away with a warning: Kubernetes sends SIGTERM and, after
``terminationGracePeriodSeconds`` (30 s by default), SIGKILL; Slurm signals a
job before its time limit; spot VMs get a short notice. This module turns that
warning into a checkpoint instead of lost work. What each task does on the
signal depends on its role (docs/preemption.md):

* a task that runs the training loop (the parameter-server chief, every
  MultiWorkerMirrored worker, a one-process run) only notes the signal; the
  loop (``toolkit.training.preemption_loop``) sees it after the steps in
  flight, the job agrees on that step, writes a complete checkpoint at it, and
  every task leaves with ``EXIT_PREEMPTED``;
* a parameter-server ps or worker (a server) leaves a notice in
  ``<model_dir>/preemption/`` for the chief and keeps serving until the chief
  has written a checkpoint after the notice (or the grace runs out), then exits
  with ``EXIT_PREEMPTED``. A ps stops the job (it holds variables); a worker
  does not: the chief checkpoints and goes on with the other workers;
* the evaluator only reads, so it exits at once.

Whatever happens, a task exits ``EXIT_PREEMPTED`` within ``grace_period``
seconds of the signal (a watchdog ends it), before the SIGKILL that follows. A
checkpoint cut short by that is never the newest one: ``tf.train.CheckpointManager``
writes the ``checkpoint`` index last, so the job falls back to the one before.

The launcher SIGTERMs its own tasks too (to restart a cluster, or at a job's
end); it writes its stop marker into the task's directory first, and a task
that finds it exits at once, as it always did.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from strategies._server_preemption import EXIT_MARGIN, exit_now, stopped_by_launcher
from toolkit.launcher._result import EXIT_PREEMPTED
from toolkit.training.config import TrainingError

__all__ = ["ENV_GRACE", "ENV_SIGNAL", "EXIT_PREEMPTED", "PreemptionOptions", "TrainingPreempted", "install",
           "watcher"]

logger = logging.getLogger(__name__)

ENV_GRACE = "TFDIST_PREEMPTION_GRACE"
ENV_SIGNAL = "TFDIST_PREEMPTION_SIGNAL"
#: where servers leave their notices for the chief, under the model directory
NOTICE_DIR = "preemption"
_TIMING = "save-seconds.json"


@dataclasses.dataclass(frozen=True)
class PreemptionOptions:
    """How a task reacts to being preempted.

    Attributes:
        grace_period: seconds from the signal to this task's exit, whatever
            happens (default 25: below Kubernetes' 30 s
            ``terminationGracePeriodSeconds``, leaving time for the exit itself).
            A checkpoint must fit in it; the chief warns when one took longer.
        signal: the signal that means "preempted" (default SIGTERM); a name
            (``"SIGUSR1"``) or a number. Slurm's ``--signal`` can send another
            one ahead of its SIGTERM.
    """

    grace_period: float = 25.0
    signal: int | str = signal.SIGTERM

    def __post_init__(self) -> None:
        grace = self.grace_period
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 < grace < 3600:
            raise TrainingError(f"`grace_period` is {grace!r}; expected seconds between 0 and 3600, e.g. 25 "
                                "(below the engine's kill deadline, 30 s on Kubernetes).", field="grace_period")
        object.__setattr__(self, "signal", _signal_number(self.signal))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **explicit: object) -> PreemptionOptions:
        """The options from ``TFDIST_PREEMPTION_GRACE``/``_SIGNAL``; ``explicit`` ones win."""
        env = os.environ if environ is None else environ
        fields: dict[str, object] = {}
        for name, var, parse in (("grace_period", ENV_GRACE, float), ("signal", ENV_SIGNAL, str)):
            text = env.get(var)
            if text is None or text == "":
                continue
            try:
                fields[name] = parse(text)
            except ValueError:
                raise TrainingError(f"{var} is {text!r}; expected a {parse.__name__}, e.g. "
                                    f"{var}={getattr(cls, name)}.", field=name) from None
        fields.update({k: v for k, v in explicit.items() if v is not None})
        return cls(**fields)  # type: ignore[arg-type]


def _signal_number(value: object) -> int:
    """``value`` (a name such as ``"SIGTERM"``/``"term"``, or a number) as a catchable signal number."""
    number: object = value
    if isinstance(value, str):
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        number = int(signal.Signals[name]) if name in signal.Signals.__members__ else \
            int(value) if value.isdigit() else None
        if number is None:
            raise TrainingError(f"`signal` is {value!r}, which is no signal name; pass e.g. 'SIGTERM' or 'SIGUSR1'.",
                                field="signal")
    if isinstance(number, bool) or not isinstance(number, int) or number not in signal.Signals._value2member_map_:
        raise TrainingError(f"`signal` is {value!r}, which is no signal number; pass e.g. 15 (SIGTERM).",
                            field="signal")
    if number in (signal.SIGKILL, signal.SIGSTOP):
        raise TrainingError(f"`signal` is {value!r}; expected a signal a process can catch, e.g. SIGTERM "
                            "(SIGKILL and SIGSTOP cannot be caught).", field="signal")
    return number


class TrainingPreempted(SystemExit):
    """Raised out of training when the task was preempted; uncaught, the process exits with ``EXIT_PREEMPTED``.

    A ``SystemExit``, so a script's ``except Exception`` does not swallow it.

    Attributes:
        step: the global step of the checkpoint written (None: nothing was written, e.g. the evaluator).
    """

    def __init__(self, step: int | None = None) -> None:
        super().__init__(EXIT_PREEMPTED)
        self.step = step


class Watcher:
    """The process's preemption state: whether, when and by which signal it was preempted.

    One per process (signals are), reached through ``watcher()``.
    """

    def __init__(self) -> None:
        self.options = PreemptionOptions()
        self.requested_at: float | None = None  # time.monotonic() of the signal
        self.requested_wall: float | None = None
        self.signum: int | None = None
        self.role = "train"  # "train", "server" or "evaluator"
        self.model_dir: str | None = None
        self.task = "local"
        self.installed = False
        self.done = threading.Event()  # set once the task's checkpoint (or its exit) is settled
        self.stopped_for: list[str] = []  # the preempted servers whose notices stopped this task's training

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def seconds_since(self) -> float:
        return 0.0 if self.requested_at is None else time.monotonic() - self.requested_at

    def remaining(self) -> float:
        """Seconds left of the grace period (the full period before any signal)."""
        return self.options.grace_period - self.seconds_since()

    def signal_name(self) -> str:
        return signal.Signals(self.signum or int(self.options.signal)).name

    def reset(self) -> None:
        """Forgets a signal (tests; a process that trains twice)."""
        self.requested_at = self.requested_wall = self.signum = None
        self.stopped_for = []
        self.done.clear()

    # ---- the handler --------------------------------------------------------------
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if stopped_by_launcher():  # not a preemption: leave as before the handler existed
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.requested:
            logger.warning("%s again (%.1f s after the first): already preempting; the checkpoint is under way",
                           signal.Signals(signum).name, self.seconds_since())
            return
        self.requested_at, self.requested_wall, self.signum = time.monotonic(), time.time(), signum
        logger.warning("%s: %s was preempted; %s, then exits with %d within the grace period of %g s",
                       signal.Signals(signum).name, self.task, _PLAN[self.role], EXIT_PREEMPTED,
                       self.options.grace_period)
        threading.Thread(target=self._watchdog, name="tfdist-preemption-watchdog", daemon=True).start()
        if self.role == "evaluator":
            raise TrainingPreempted()
        if self.role == "server":
            self._serve_until_checkpoint()

    def _watchdog(self) -> None:
        if self.done.wait(self.options.grace_period):
            return
        logger.error("%s: the grace period of %g s ran out before the checkpoint was written; exiting with %d. "
                     "The job resumes from its newest complete checkpoint (a cut-off write is never used). "
                     "Give a longer grace (TFDIST_PREEMPTION_GRACE, and the engine's kill deadline) if this repeats.",
                     self.task, self.options.grace_period, EXIT_PREEMPTED)
        exit_now(EXIT_PREEMPTED)

    def _serve_until_checkpoint(self) -> None:
        """A server's signal: tell the chief, keep serving until its checkpoint lands, then exit."""
        if self.model_dir is None:
            logger.warning("%s: no model directory to tell the chief in; exiting with %d", self.task, EXIT_PREEMPTED)
            raise TrainingPreempted()
        assert self.requested_wall is not None
        write_notice(self.model_dir, self.task, self.signum or 0, self.requested_wall)
        notice = Path(self.model_dir) / NOTICE_DIR / f"{self.task}.json"
        index = os.path.join(self.model_dir, "checkpoint")
        deadline = time.monotonic() + max(self.remaining() - EXIT_MARGIN, 0.0)
        # The chief's answer is a checkpoint written after it took the notice: a periodic one that lands
        # in between is not (the chief may still run steps on this server before it stops).
        seen = self.requested_wall
        while time.monotonic() < deadline and not stopped_by_launcher():
            now = time.time()
            if notice.exists():
                seen = now
            elif _mtime(index) >= seen:
                logger.info("%s: the chief wrote its checkpoint %.1f s after the signal; exiting with %d",
                            self.task, self.seconds_since(), EXIT_PREEMPTED)
                break
            time.sleep(0.1)
        else:
            logger.warning("%s: no checkpoint within %.1f s of the signal; exiting with %d (the job resumes from "
                           "its newest complete checkpoint)", self.task, self.seconds_since(), EXIT_PREEMPTED)
        self.done.set()
        raise TrainingPreempted()


_PLAN = {
    "train": "the job checkpoints after the steps in flight",
    "server": "it keeps serving until the chief has checkpointed",
    "evaluator": "the evaluator stops reading (it writes no checkpoint)",
}

_WATCHER = Watcher()


def watcher() -> Watcher:
    """This process's ``Watcher``."""
    return _WATCHER


def install(options: PreemptionOptions | None = None, *, role: str = "train", model_dir: str | None = None,
            task: str | None = None) -> Watcher:
    """Installs the preemption handler for this process (from the main thread; elsewhere it only logs).

    Args:
        options: None reads ``PreemptionOptions.from_env()``.
        role: ``"train"`` (runs the loop), ``"server"`` (a parameter-server ps
            or worker) or ``"evaluator"``.
        model_dir: the job's model directory (servers leave their notices there).
        task: this task's name for the log, e.g. ``worker-1``.
    """
    w = _WATCHER
    w.options = options if options is not None else PreemptionOptions.from_env()
    w.role = role
    w.model_dir = model_dir if model_dir is not None else w.model_dir
    w.task = task or os.environ.get("TFDIST_TASK_NAME") or w.task
    if threading.current_thread() is not threading.main_thread():
        logger.debug("not the main thread: %s keeps its signal handlers", w.task)
        return w
    signal.signal(int(w.options.signal), w._handle)
    w.installed = True
    return w


# ---- notices: a server tells the chief -------------------------------------------------------
def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def write_notice(model_dir: str, task: str, signum: int, wall: float) -> None:
    """Leaves ``<model_dir>/preemption/<task>.json`` for the chief (written whole, then renamed)."""
    directory = Path(model_dir) / NOTICE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{task}.json.tmp"
    temp.write_text(json.dumps({"task": task, "signal": signum, "time": wall}))
    os.replace(temp, directory / f"{task}.json")


def take_notices(model_dir: str, since: float) -> list[dict[str, object]]:
    """The servers' notices written after ``since`` (wall time), removed once read; older ones are dropped."""
    directory = Path(model_dir) / NOTICE_DIR
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.glob("*.json")):
        if path.name == _TIMING:
            continue
        try:
            notice = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        path.unlink(missing_ok=True)
        if isinstance(notice, dict) and float(notice.get("time", 0.0)) >= since:
            found.append(notice)
        else:
            logger.info("dropped a preemption notice from an earlier run: %s", notice)
    return found


# ---- the grace against the checkpoint's time ---------------------------------------------------
def record_save_seconds(model_dir: str, seconds: float, grace: float) -> None:
    """Keeps the longest checkpoint write seen (for the next start-up's check); warns when it exceeds the grace."""
    path = Path(model_dir) / NOTICE_DIR / _TIMING
    longest = max(seconds, _read_seconds(path))
    if seconds > grace:
        logger.warning("a checkpoint took %.1f s to write, longer than the preemption grace period (%g s): a "
                       "preempted job would be killed before its checkpoint lands and redo the steps since the "
                       "previous one. Raise TFDIST_PREEMPTION_GRACE and the engine's kill deadline "
                       "(terminationGracePeriodSeconds on Kubernetes).", seconds, grace)
    if longest == seconds:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_suffix(".tmp")
            temp.write_text(json.dumps({"seconds": seconds}))
            os.replace(temp, path)
        except OSError as exc:
            logger.debug("could not record the checkpoint time: %s", exc)


def _read_seconds(path: Path) -> float:
    try:
        return float(json.loads(path.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def check_grace(model_dir: str, grace: float) -> None:
    """At start-up: says so when a checkpoint of this job has already taken longer than the grace period."""
    seconds = _read_seconds(Path(model_dir) / NOTICE_DIR / _TIMING)
    if seconds > grace:
        logger.warning("the grace period for a preemption is %g s, but a checkpoint of this job took %.1f s: "
                       "a preemption would not finish its checkpoint. Raise TFDIST_PREEMPTION_GRACE (and the "
                       "engine's kill deadline).", grace, seconds)
