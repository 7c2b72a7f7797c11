"""The tuning loop: Optuna asks, trial jobs run (up to maxParallelTrials at once), Optuna is told.

Runs inside the tuning job's supervisor. The study lives in the job store's own
SQLite file (Optuna's RDB storage adds its tables there), named after the job,
so ``describe``, a supervisor reading it later and a job resuming it
(``resumePreviousJobId``) all see every trial. Only this thread talks to
Optuna; each trial runs in a worker thread that starts its job's processes
through the launcher and waits for them.

While trials run, this thread also reads each one's measurements (``_watch``),
reports them to Optuna and, with ``enableTrialEarlyStopping``, asks the pruner
(``_pruning``) whether to stop it. A trial stopped early is stopped as a cancel
stops it (every process of its cluster, its files kept), then told to Optuna as
PRUNED with its measurements: it counts as finished, not failed, and its best
measurement is its objective.

Stopping: more failed trials than ``maxFailedTrials`` ends the job FAILED, a
cancel ends it CANCELLED. Either way every running trial is marked CANCELLING
and its recorded process groups are signalled (SIGTERM, then SIGKILL after
``_KILL_AFTER`` seconds) until every trial thread has returned.
"""
from __future__ import annotations

import fcntl
import logging
import math
import signal
import threading
import time
import zlib
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from toolkit.jobs.engines.local._local_plan import LocalPlan
from toolkit.jobs.engines.local._procs import signal_group
from toolkit.jobs.errors import JobStateError
from toolkit.jobs.model.hyperparams import HyperparameterSpec
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.storage.store import JobStore
from toolkit.jobs.tuning._objective import Point, TuningError, missing_tag, select
from toolkit.jobs.tuning._pruning import make_pruner, may_stop
from toolkit.jobs.tuning._space import distributions, make_sampler, trial_args, trial_budget, trial_values
from toolkit.jobs.tuning._summary import StudyLog, summarize
from toolkit.jobs.tuning._trials import (
                                         TrialOutcome,
                                         TrialRun,
                                         make_trial,
                                         register_trial,
                                         run_trial,
                                         stop_trial_early,
)
from toolkit.jobs.tuning._watch import TrialWatch, measurement_docs

__all__ = ["StudyOutcome", "StudyRunner", "open_study", "study_seed"]

_log = logging.getLogger(__name__)
_POLL = 0.5
_KILL_AFTER = 10.0   # seconds of SIGTERM before a stopped trial's processes get SIGKILL
_STOP_TIMEOUT = 120.0


@dataclass(frozen=True)
class StudyOutcome:
    """How the tuning job ends."""

    state: JobState
    message: str | None = None
    error: str | None = None


def study_seed(name: str) -> int:
    """The sampler's seed: fixed per job name, so a job's sequence of trials can be reproduced."""
    return zlib.crc32(name.encode())


def open_study(store: JobStore, name: str, hp: HyperparameterSpec, *, seed: int | None = None) -> optuna.Study:
    """The job's study in the store's SQLite file, created on first use.

    Optuna creates its tables on first contact and two supervisors starting at
    once would both try (a UNIQUE failure on ``alembic_version``), so opening
    the storage is serialised across processes with a lock file beside the database.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with (store.home / "optuna.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            storage = optuna.storages.RDBStorage(store.url, engine_kwargs={"connect_args": {"timeout": 60}})
            return optuna.create_study(storage=storage, study_name=name, load_if_exists=True,
                                       direction="maximize" if hp.goal == "MAXIMIZE" else "minimize",
                                       sampler=make_sampler(hp, seed=seed), pruner=make_pruner(hp))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class _Watched:
    """A running trial's measurements as the study has seen and reported them."""

    watch: TrialWatch
    points: list[Point] = field(default_factory=list)
    reported: set[int] = field(default_factory=set)
    stopped_at: int | None = None       # the step at which it was stopped early
    stop_since: float | None = None     # monotonic time of the stop, for SIGKILL after _KILL_AFTER


class StudyRunner:
    """Runs the study of tuning job ``name`` to its end; ``cancelled`` is set by the supervisor's SIGTERM."""

    def __init__(self, store: JobStore, name: str, *, cancelled: threading.Event) -> None:
        self.store, self.name, self.cancelled = store, name, cancelled
        record = store.get(name)
        self.spec = dict(record.spec)
        hp = JobSpec.from_dict(self.spec).training_input.hyperparameters
        assert hp is not None  # a tuning job's spec has its hyperparameters block
        self.hp: HyperparameterSpec = hp
        self.base = LocalPlan.from_dict(dict(record.details["plan"]))
        self.job_dir = record.details["tuning"]["jobDir"]
        self.log = StudyLog(store.job_dir(name) / "logs" / "study.log")
        self.running: dict[Future, tuple[optuna.trial.Trial, TrialRun]] = {}
        self.watches: dict[Future, _Watched] = {}
        self.failed = 0
        self._stop_since: float | None = None
        self._published = 0.0

    def run(self) -> StudyOutcome:
        study = open_study(self.store, self.name, self.hp, seed=study_seed(self.name))
        self._resume(study)
        budget = trial_budget(self.hp)
        stop_error: str | None = None
        started = 0
        self.log.write(f"study {self.name}: {budget} trials, {self.hp.max_parallel_trials} at a time, "
                       f"{self.hp.goal} {self.hp.hyperparameter_metric_tag!r} ({self.hp.algorithm})")
        with ThreadPoolExecutor(max_workers=self.hp.max_parallel_trials, thread_name_prefix="trial") as pool:
            try:
                while True:
                    stopping = self.cancelled.is_set() or stop_error is not None
                    while not stopping and started < budget and len(self.running) < self.hp.max_parallel_trials:
                        started += 1
                        self._start(study, pool, started)
                    if not self.running:
                        break
                    if stopping:
                        self._stop_running()
                    else:
                        self._watch(study)
                    done, _ = wait(list(self.running), timeout=_POLL, return_when=FIRST_COMPLETED)
                    for future in done:
                        self._tell(study, future)
                    if done:
                        self._publish(study)
                    if stop_error is None and self.failed > self.hp.max_failed_trials:
                        stop_error = self._too_many_failures(study)
            finally:
                self._drain()
        self._publish(study, final=True)
        return self._outcome(study, stop_error)

    def _resume(self, study: optuna.Study) -> None:
        """Copies a previous job's finished trials in, once, so the sampler starts from what it learned."""
        previous = self.hp.resume_previous_job_id
        if not previous or any(t.user_attrs.get("resumedFrom") for t in study.trials):
            return
        old = optuna.load_study(study_name=previous, storage=self.store.url)
        finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)  # stopped early counts
        kept = [t for t in old.trials if t.state in finished]
        for t in kept:
            study.add_trial(optuna.trial.create_trial(
                state=t.state, params=t.params, distributions=t.distributions,
                value=t.value if t.state is optuna.trial.TrialState.COMPLETE else None,
                intermediate_values=t.intermediate_values, user_attrs={**t.user_attrs, "resumedFrom": previous}))
        self.log.write(f"resumed {len(kept)} finished trials of {previous}")

    def _start(self, study: optuna.Study, pool: ThreadPoolExecutor, number: int) -> None:
        trial = study.ask(distributions(self.hp))
        values = trial_values(self.hp, trial.params)
        run = make_trial(self.name, number, base=self.base, job_dir=self.job_dir, spec=self.spec,
                         values=values, flags=trial_args(values))
        for key, value in (("trialId", number), ("job", run.name), ("values", dict(values)), ("state", "RUNNING")):
            trial.set_user_attr(key, value)
        register_trial(self.store, run)
        future = pool.submit(run_trial, self.store, run, timeout=self.base.timeout)
        self.running[future] = (trial, run)
        self.watches[future] = _Watched(TrialWatch(run.output_dir, self.hp.hyperparameter_metric_tag))
        self.log.write(f"trial {number} started as job {run.name}: {' '.join(trial_args(values))}")
        self._publish(study)

    def _watch(self, study: optuna.Study) -> None:
        """Reads each running trial's new measurements, reports them, and stops a trial that falls behind."""
        changed = False
        for future, (trial, run) in list(self.running.items()):
            watched = self.watches[future]
            if future.done():
                continue
            if watched.stop_since is not None:
                self._signal(run, watched.stop_since)
                continue
            if self._report(trial, run, watched):
                changed = True
                if may_stop(self.hp, len(watched.points)) and trial.should_prune():
                    self._stop_early(trial, run, watched)
            warning = watched.watch.missing_tag()
            if warning:
                self.log.write(f"trial {run.number}: {warning}")
                trial.set_user_attr("warning", warning)
                self.store.update_details(run.name, warning=warning)
                changed = True
        if changed and time.monotonic() - self._published > 1.0:
            self._publish(study)

    def _report(self, trial: optuna.trial.Trial, run: TrialRun, watched: _Watched) -> bool:
        """Reports the trial's new measurements to Optuna and its record; True if there were any."""
        points = watched.watch.poll()
        new = [p for p in points if p.step not in watched.reported and p.step >= 0]  # Optuna's steps are >= 0
        if not new:
            return False
        for point in new:
            trial.report(point.value, point.step)
            watched.reported.add(point.step)
        watched.points = points
        self.store.update_details(run.name, measurements=measurement_docs(points))
        return True

    def _stop_early(self, trial: optuna.trial.Trial, run: TrialRun, watched: _Watched) -> None:
        last = watched.points[-1]
        pruner = self.hp.early_stopping.pruner
        reason = (f"stopped early at step {last.step} by the {pruner} pruner: {self.hp.hyperparameter_metric_tag} "
                  f"fell behind the finished trials after {len(watched.points)} measurements")
        watched.stopped_at = last.step
        watched.stop_since = time.monotonic()
        self.log.write(f"trial {run.number} {reason}")
        stop_trial_early(self.store, run, reason)

    def _tell(self, study: optuna.Study, future: Future) -> None:
        trial, run = self.running.pop(future)
        watched = self.watches.pop(future)
        try:
            outcome = future.result()
        except Exception as exc:  # a bug of ours in one trial's thread must not lose the other trials
            _log.exception("trial %d failed in the supervisor", run.number)
            outcome = TrialOutcome(JobState.FAILED, None, f"the supervisor failed to run it: {exc}")
        self._report(trial, run, watched)  # what it wrote after the last look
        stopped = watched.stopped_at is not None and outcome.state is JobState.CANCELLED
        point, error, state = None, outcome.error, outcome.state
        if outcome.state is JobState.SUCCEEDED or stopped:
            try:
                point = self._objective(run, watched, stopped=stopped)
                state, error = JobState.SUCCEEDED, None
            except TuningError as exc:
                state, error = JobState.FAILED, str(exc)
        trial.set_user_attr("state", state.value)
        trial.set_user_attr("error", error)
        trial.set_user_attr("step", None if point is None else point.step)
        trial.set_user_attr("isTrialStoppedEarly", stopped)
        if stopped:  # the step the pruner spoke at; what it wrote before its processes stopped is kept too
            trial.set_user_attr("stoppedAtStep", watched.stopped_at)
        self.store.update_details(run.name, isTrialStoppedEarly=stopped)
        if point is not None:
            trial.set_user_attr("objective", point.value)
            if stopped:  # Optuna's own word for it; its value is the last measurement, ours (the best) is an attr
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, point.value)
            how = f"stopped early, best {self.hp.hyperparameter_metric_tag}" if stopped else \
                f"SUCCEEDED: {self.hp.hyperparameter_metric_tag}"
            self.log.write(f"trial {run.number} {how} = {point.value:.6g} at step {point.step}")
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.log.write(f"trial {run.number} {state}: {error}")
        self.failed += state is JobState.FAILED

    def _objective(self, run: TrialRun, watched: _Watched, *, stopped: bool) -> Point:
        """The trial's objective: its selected measurement, or its best one when it was stopped early."""
        tag = self.hp.hyperparameter_metric_tag
        points, series = watched.points, watched.watch.tail.series
        if not points:
            raise missing_tag(run.output_dir, list(series), tag)
        mode = "BEST" if stopped else self.hp.metric_value
        point = select(points, goal=self.hp.goal, mode=mode)
        if math.isnan(point.value):
            what = "every measurement" if stopped or mode == "BEST" else f"the {self.hp.measurement_selection}"
            raise TuningError(f"{what} of {tag!r} is NaN (step {point.step}); a trial needs a number to "
                              "count. Check the trainer for a diverging loss (a smaller learning rate range).")
        return point

    def _too_many_failures(self, study: optuna.Study) -> str:
        errors = [f"trial {t.user_attrs['trialId']}: {t.user_attrs.get('error')}" for t in study.trials
                  if "resumedFrom" not in t.user_attrs and t.user_attrs.get("state") == "FAILED"]
        message = (f"{self.failed} trials failed, more than maxFailedTrials ({self.hp.max_failed_trials}); "
                   f"the study stopped. " + "; ".join(errors[:3]))
        self.log.write(message)
        return message

    def _stop_running(self) -> None:
        """Cancels every running trial and signals its processes (again on each call, for late starters)."""
        if self._stop_since is None:
            self._stop_since = time.monotonic()
        for _, run in self.running.values():
            try:
                if not self.store.get(run.name).state.is_final:
                    self.store.transition(run.name, JobState.CANCELLING, message="the tuning job is stopping")
            except JobStateError:
                pass  # it reached an end state or CANCELLING on its own: nothing to move
            self._signal(run, self._stop_since)

    def _signal(self, run: TrialRun, since: float) -> None:
        """SIGTERM to each of the trial's process groups, SIGKILL once ``_KILL_AFTER`` seconds have passed."""
        sig = signal.SIGKILL if time.monotonic() - since > _KILL_AFTER else signal.SIGTERM
        nonce = self.store.supervisor(run.name).nonce
        for _, pid, ticks in self.store.task_processes(run.name):
            signal_group(pid, ticks, sig, nonce=nonce)

    def _drain(self) -> None:
        """Never returns with a trial's processes alive (an exception, or the normal end)."""
        deadline = time.monotonic() + _STOP_TIMEOUT
        while self.running and time.monotonic() < deadline:
            self._stop_running()
            done, _ = wait(list(self.running), timeout=_POLL)
            for future in done:
                self.running.pop(future)

    def _publish(self, study: optuna.Study, *, final: bool = False) -> None:
        output = summarize(self.store, study, self.hp)
        self.store.update_details(self.name, trainingOutput=output)
        self._published = time.monotonic()
        if final:
            self._plot(output)

    def _plot(self, output: dict[str, Any]) -> None:
        from toolkit.jobs.tuning.plot import plot_trials
        path = Path(self.job_dir) / "trials.png"
        try:
            plot_trials(output, path, goal=self.hp.goal)
        except TuningError as exc:  # matplotlib is optional: the study's result stands without the picture
            _log.warning("no plot: %s", exc)
            return
        self.store.update_details(self.name, plot=str(path))

    def _outcome(self, study: optuna.Study, stop_error: str | None) -> StudyOutcome:
        if self.cancelled.is_set():
            return StudyOutcome(JobState.CANCELLED, message="every trial stopped")
        if stop_error is not None:
            return StudyOutcome(JobState.FAILED, error=stop_error)
        output = summarize(self.store, study, self.hp)
        best = output.get("bestTrial")
        if best is None:
            return StudyOutcome(JobState.FAILED, error="no trial produced an objective; see "
                                "`toolkit.jobs.describe(name)` for each trial's error.")
        return StudyOutcome(JobState.SUCCEEDED, message=f"best trial {best['trialId']}: "
                            f"{self.hp.hyperparameter_metric_tag} = {best['finalMetric']['objectiveValue']:.6g}")
