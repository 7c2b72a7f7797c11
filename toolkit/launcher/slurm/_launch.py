"""``launch_slurm``: one ``sbatch`` per job, one ``srun`` task per TensorFlow task, watched to its end.

The batch script runs a single ``srun`` step whose tasks each run
``toolkit.launcher.slurm._task`` (TF_CONFIG from Slurm's variables). This
process watches the job from the submitting host: Slurm's state from ``squeue``
and ``scontrol``, each task's node, pid and exit code from the status files the
tasks write, their output from the per-task logs (echoed with ``[worker-1]``
prefixes). The job ends when the chief ends: the servers exit on the chief's
goodbye, and whatever is left after ``grace_period`` is cancelled. Any way out
of here (a timeout, ``should_stop``, an exception, SIGTERM) cancels the Slurm
job first, so no job is left running. A chief that ends preempted (143, e.g. on
Slurm's ``--signal`` before the time limit) ends the launch as preempted, or,
when the spec is ``restartable`` (or the caller says the entrypoint resumes,
``resubmit_preempted``) and has ``max_preemptions`` left, the job is submitted
again and resumes from the checkpoint written at the signal.

Accounting without slurmdbd (``sacct`` is not there): the job's own record
(``scontrol show job``: state, exit code, reason, times, nodes) is read at
the end of each Slurm job, before Slurm forgets it (``MinJobAge``), and each
task's state comes from its status file; a task that never reported an end
was killed with the Slurm job, and its state says by what (``on_job``,
``on_placement``). ``on_job`` also gets the restarts so far, preemptions apart
from failures, so that a run cut short (cancelled) still tells them.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from strategies._serve_options import ENV_PREEMPTION_GRACE
from toolkit.launcher._result import (
    EXIT_PREEMPTED,
    EventKind,
    LaunchResult,
    Reason,
    TaskEvent,
    TaskResult,
    is_preemption,
)
from toolkit.launcher._signal_dir import name_remote_signal_dir
from toolkit.launcher._spec import ENV_JOB_NONCE, LaunchError, LaunchSpec
from toolkit.launcher._task import shell_exit_code
from toolkit.launcher.slurm import _commands as slurm
from toolkit.launcher.slurm._options import SlurmOptions
from toolkit.launcher.slurm._shared import check_shared, status_dir

__all__ = ["launch_slurm"]

_log = logging.getLogger(__name__)
_POLL = 0.25        # the tasks' status files and logs (file reads)
_SQUEUE_POLL = 1.0  # Slurm's own view (a squeue process each time; sooner once the chief has ended)


def _layout(spec: LaunchSpec) -> tuple[str, list[str]]:
    """The layout text for ``from_env`` and the task names in rank order (chief, workers, ps, evaluator)."""
    chief = spec.chief or 0
    names = ([spec.tf_dialect.task_name("chief-0")] * chief + [f"worker-{i}" for i in range(spec.workers)]
             + [f"ps-{i}" for i in range(spec.ps)] + ["evaluator-0"] * spec.evaluator)
    return f"ps={spec.ps},chief={chief},evaluator={spec.evaluator}", names


def _script(spec: LaunchSpec, job_dir: Path, options: SlurmOptions, layout: str, runs_before: int = 0) -> str:
    d = spec.tf_dialect
    dialect = json.dumps({"name": d.name, "chief": d.chief, "extras": dict(d.extras),
                          "task_extras": dict(d.task_extras)})
    task = [sys.executable, "-m", "toolkit.launcher.slurm._task", "--job-dir", str(job_dir), "--layout", layout,
            "--dialect", dialect, "--max-restarts", str(spec.max_restarts),
            "--max-preemptions", str(spec.max_preemptions),
            "--settle-period", str(spec.settle_period), "--runs-before", str(runs_before)]
    if options.port is not None:
        task += ["--port", str(options.port)]
    srun = ["srun", "--kill-on-bad-exit=0", "--distribution=block", *task, "--", *spec.cmd]
    return "#!/bin/sh\n# a tfdist job: one srun task per TensorFlow task\nexec " + shlex.join(srun) + "\n"


def _refusal(message: str, options: SlurmOptions) -> LaunchError:
    """Slurm's own words, with the field they are about."""
    lower = message.lower()
    for key, field, value in (("partition", "partition", options.partition),
                              ("time limit", "time_limit", options.time_limit),
                              ("node count", "nodes", options.nodes), ("gres", "gpus_per_node", options.gpus_per_node),
                              ("memory", "mem_per_cpu_mib", options.mem_per_cpu_mib)):
        if key in lower:
            return LaunchError(f"Slurm refused the job because of `{field}` ({value!r}): {message}", field=field)
    return LaunchError(f"Slurm refused the job: {message}", field="sbatch")


def _submit(spec: LaunchSpec, job_dir: Path, options: SlurmOptions, env: Mapping[str, str], ntasks: int,
            layout: str, runs_before: int = 0) -> str:
    slurm_dir = job_dir / "slurm"
    status_dir(job_dir).mkdir(parents=True, exist_ok=True)
    for old in status_dir(job_dir).glob("*.json"):  # a resubmitted job's tasks report afresh
        old.unlink()
    script = slurm_dir / "batch.sh"
    script.write_text(_script(spec, job_dir, options, layout, runs_before))
    argv = ["sbatch", "--parsable", f"--job-name=tfdist-{job_dir.name}"[:64], f"--ntasks={ntasks}",
            f"--output={slurm_dir / 'batch.log'}", f"--chdir={spec.cwd or Path.cwd()}", "--export=ALL",
            *options.sbatch_flags(timeout=spec.timeout), str(script)]
    try:
        out = slurm.run(argv, env=env)
    except LaunchError as exc:
        raise _refusal(str(exc).removeprefix("sbatch failed: "), options) from None
    return out.strip().split(";")[0]


class _Watch:
    """What the watcher knows of each task, from the status files and logs the tasks write."""

    def __init__(self, job_dir: Path, names: list[str], stream: IO[str] | None,
                 on_task: Callable[[TaskEvent], None] | None) -> None:
        self.job_dir, self.names, self.stream, self.on_task = job_dir, names, stream, on_task
        self.status: dict[str, dict[str, Any]] = {}
        self.earlier: dict[str, dict[str, int]] = {}  # failures and preemptions in the earlier Slurm jobs
        self.offsets: dict[str, int] = {}

    def poll(self) -> None:
        for name in self.names:
            path = status_dir(self.job_dir) / f"{name}.json"
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            old = self.status.get(name)
            self.status[name] = doc
            if self.on_task is None:
                continue
            log = self.job_dir / "logs" / f"{name}.log"
            if old is None or (old["pid"], old["restarts"]) != (doc["pid"], doc["restarts"]):
                self.on_task(TaskEvent(name, EventKind.STARTED, doc["pid"] or 0, doc["restarts"], None, log))
            if doc["exit_code"] is not None and (old is None or old["exit_code"] is None):
                self.on_task(TaskEvent(name, EventKind.EXITED, doc["pid"] or 0, doc["restarts"], doc["exit_code"],
                                       log))
        self.echo()

    def echo(self) -> None:
        if self.stream is None:
            return
        for name in self.names:
            path = self.job_dir / "logs" / f"{name}.log"
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(name, 0))
                    data = fh.read()
            except OSError:
                continue
            complete = data[:data.rfind(b"\n") + 1]
            self.offsets[name] = self.offsets.get(name, 0) + len(complete)
            for line in complete.decode(errors="replace").splitlines():
                self.stream.write(f"[{name}] {line}\n")
        self.stream.flush()

    def chief_done(self, chief: str) -> bool:
        return (self.status.get(chief) or {}).get("exit_code") is not None

    def placement(self, ended: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
        """Per task: its node and address, and its state as its status file (or ``ended``: why it never
        reported an end) tells."""
        ended = ended or {}
        return {n: {"node_id": s.get("node") or s.get("host"), "address": s.get("address"),
                    "state": "KILLED" if n in ended else s.get("state"), "exit_code": s.get("exit_code"),
                    "failures": s.get("failures", 0), "preemptions": s.get("preemptions", 0),
                    "started_at": s.get("started_at"), "ended_at": s.get("ended_at"),
                    **({"reason": ended[n]} if n in ended else {})}
                for n, s in self.status.items()}

    def unreported(self, info: Mapping[str, str]) -> dict[str, str]:
        """Why each task without an exit code in its status file has none: Slurm ended the job under it."""
        why = f"killed with Slurm job {info.get('JobId', '?')}, which ended {info.get('JobState', 'unrecorded')}"
        if info.get("Reason") not in (None, "None"):
            why += f" ({info['Reason']})"
        return {n: why for n, s in self.status.items() if s.get("exit_code") is None}

    def restarts(self, kind: str) -> int:
        """Restarts of tasks alone after ``kind`` ("failures" or "preemptions"), over every Slurm job."""
        return sum(s.get(kind, 0) for s in self.status.values()) + sum(e[kind] for e in self.earlier.values())


def accounting(job_id: str, info: Mapping[str, str]) -> dict[str, Any]:
    """The job's record as ``scontrol`` keeps it for ``MinJobAge`` after its end (``sacct -j`` without slurmdbd)."""
    keys = {"state": "JobState", "exit_code": "ExitCode", "reason": "Reason", "submitted": "SubmitTime",
            "started": "StartTime", "ended": "EndTime", "nodes": "NodeList", "time_limit": "TimeLimit"}
    return {"job_id": job_id, **{k: info[v] for k, v in keys.items() if v in info}}


def _progress(jobs: list[dict[str, Any]], watch: _Watch) -> dict[str, Any]:
    """The Slurm jobs so far, and the restarts so far: each Slurm job after the first was a resubmission
    after a preemption; tasks restarted alone count by cause."""
    resubmits = len(jobs) - 1
    per_task = {n: resubmits + watch.earlier.get(n, {}).get("preemptions", 0) + s.get("preemptions", 0)
                for n, s in watch.status.items()}
    return {"jobs": list(jobs),
            "restarts": {"preemptions": resubmits + watch.restarts("preemptions"),
                         "failures": watch.restarts("failures"),
                         "preemptedTasks": {n: c for n, c in per_task.items() if c}}}


def _wait_gone(job_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if slurm.squeue_state(job_id) is None:
            return True
        time.sleep(_POLL)
    return False


def launch_slurm(spec: LaunchSpec, *, job_dir: Path, env: Mapping[str, str] | None = None,
                 stream: IO[str] | None = None, options: SlurmOptions | None = None,
                 on_task: Callable[[TaskEvent], None] | None = None,
                 on_placement: Callable[[dict], None] | None = None,
                 on_submit: Callable[[str], None] | None = None,
                 on_job: Callable[[dict[str, Any]], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 shared_paths: tuple[str, ...] = (), resubmit_preempted: bool | None = None) -> LaunchResult:
    """Runs ``spec`` as one Slurm job and waits for its end (see the module's doc).

    ``on_job`` gets ``{"jobs": [...], "restarts": {...}}`` each time a Slurm job is submitted or ends:
    the Slurm jobs so far (``accounting``: id, state, exit code, reason, times, nodes) and the restarts
    so far (``preemptions``, ``failures``, ``preemptedTasks``: the shape of the job store's record).
    ``resubmit_preempted``: submit a preempted job again on ``max_preemptions`` (default:
    ``spec.restartable``).

    Raises:
        LaunchError: sbatch/srun missing, a local directory on a multi-node job, or
            Slurm's refusal (its message, with the field it is about); nothing is left queued.
    """
    options = options or SlurmOptions()
    if spec.preload:
        raise LaunchError(f"`preload` is {spec.preload!r}, but on Slurm every task starts its own interpreter on "
                          "its node (srun). Preloading is for the local launcher: leave `preload` out.",
                          field="preload")
    slurm.require("sbatch", "srun", "squeue", "scontrol", "scancel")
    job_dir = Path(job_dir).resolve()
    job_dir.mkdir(parents=True, exist_ok=True)
    layout, names = _layout(spec)
    check_shared([str(job_dir), *shared_paths], nodes=options.nodes, asserted=options.shared_dirs)
    full_env = {**os.environ, **(env or {}), ENV_JOB_NONCE: secrets.token_hex(8)}
    name_remote_signal_dir(full_env)  # private and random, made by each task on its node
    if options.preemption_grace:
        full_env.setdefault(ENV_PREEMPTION_GRACE, str(options.preemption_grace))
    started = time.monotonic()
    watch = _Watch(job_dir, names, stream, on_task)
    resubmit = spec.restartable if resubmit_preempted is None else resubmit_preempted
    resubmits, runs_before = 0, 0
    jobs: list[dict[str, Any]] = []  # every Slurm job of this launch, as ``accounting`` records it
    while True:
        job_id, reason, ended = _run_once(spec, job_dir, options, full_env, names, layout, watch, started,
                                          runs_before, jobs, on_placement=on_placement, on_submit=on_submit,
                                          on_job=on_job, should_stop=should_stop)
        chief = (watch.status.get(names[0]) or {}).get("exit_code")
        if reason is not Reason.SUCCEEDED or not is_preemption(chief):
            break
        if resubmits + watch.restarts("preemptions") >= spec.max_preemptions or not resubmit:
            why = ("the entrypoint is not restartable" if not resubmit
                   else f"max_preemptions={spec.max_preemptions}")
            _log.warning("Slurm job %s was preempted (%s exited %s); the job ends as preempted (%s)",
                         job_id, names[0], chief, why)
            break
        _log.warning("Slurm job %s was preempted (%s exited %s); submitting it again from its checkpoint "
                     "(preemption %d of %d)", job_id, names[0], chief, resubmits + 1, spec.max_preemptions)
        resubmits += 1
        runs_before += 1 + max((s.get("restarts", 0) for s in watch.status.values()), default=0)
        for name, s in watch.status.items():  # what the tasks' restarts alone were in this Slurm job
            before = watch.earlier.get(name, {})
            watch.earlier[name] = {k: before.get(k, 0) + s.get(k, 0) for k in ("failures", "preemptions")}
        watch.status.clear()
    return _result(spec, job_dir, job_id, names, watch, reason, time.monotonic() - started, resubmits, ended)


def _run_once(spec: LaunchSpec, job_dir: Path, options: SlurmOptions, env: Mapping[str, str], names: list[str],
              layout: str, watch: _Watch, started: float, runs_before: int, jobs: list[dict[str, Any]], *,
              on_placement: Callable[[dict], None] | None, on_submit: Callable[[str], None] | None,
              on_job: Callable[[dict[str, Any]], None] | None,
              should_stop: Callable[[], bool] | None) -> tuple[str, Reason, dict[str, str]]:
    """Submits the job once and watches it to its end; returns its Slurm id, why the watch ended, and why
    each task that never reported an end has none (it was killed with the Slurm job)."""
    job_id = _submit(spec, job_dir, options, env, len(names), layout, runs_before)
    _log.info("submitted Slurm job %s: %s", job_id, ", ".join(names))
    jobs.append({"job_id": job_id, "state": "PENDING"})
    if on_submit is not None:
        on_submit(job_id)
    if on_job is not None:
        on_job(_progress(jobs, watch))
    reason, finished, chief_end, next_squeue = Reason.SUCCEEDED, False, None, 0.0
    told: dict[str, dict[str, Any]] = {}
    try:
        while True:
            watch.poll()
            if on_placement is not None and watch.status and watch.placement() != told:
                told = watch.placement()  # only a change is reported (the job store writes each one)
                on_placement(told)
            if time.monotonic() >= next_squeue or chief_end is not None:
                next_squeue = time.monotonic() + _SQUEUE_POLL
                if slurm.squeue_state(job_id) is None:
                    finished = True
                    break
            if should_stop is not None and should_stop():
                reason = Reason.INTERRUPTED
                break
            if spec.timeout is not None and time.monotonic() - started > spec.timeout:
                reason = Reason.TIMEOUT
                break
            if watch.chief_done(names[0]):
                chief_end = chief_end or time.monotonic()
                if time.monotonic() - chief_end > spec.grace_period:
                    _log.warning("job %s: tasks still running %.0f s after the chief ended; cancelling them",
                                 job_id, spec.grace_period)
                    break
            time.sleep(_POLL)
    finally:  # also on the way out of a signal (the job's supervisor cancelled): the record is kept all the same
        if not finished:
            slurm.scancel(job_id)
            if not _wait_gone(job_id, 60.0):
                _log.error("Slurm job %s still shows in squeue 60 s after scancel", job_id)
        watch.poll()
        info = slurm.job_info(job_id)
        jobs[-1] = accounting(job_id, info)
        ended = watch.unreported(info) if finished else {}
        for name, why in ended.items():
            _log.warning("%s: %s before it reported an end", name, why)
        if on_placement is not None and watch.status:
            on_placement(watch.placement(ended))
        if on_job is not None:
            on_job(_progress(jobs, watch))
    if finished and info.get("JobState") == "CANCELLED":  # someone's scancel: the tasks' SIGTERM was no preemption
        _log.warning("Slurm job %s was cancelled outside this launch (scancel); it ends cancelled", job_id)
        reason = Reason.INTERRUPTED
    return job_id, reason, ended


def _result(spec: LaunchSpec, job_dir: Path, job_id: str, names: list[str], watch: _Watch, reason: Reason,
            duration: float, resubmits: int = 0, ended: Mapping[str, str] | None = None) -> LaunchResult:
    """The launch's outcome; ``resubmits``: how many times the job was submitted again after a preemption;
    ``ended``: the tasks Slurm killed with the job before they reported an end.

    A task without an exit code is STOPPED when this launcher ended the job (its cancel or timeout, the
    chief's end), FAILED when Slurm ended it by itself (time limit, node failure, someone's ``scancel``).
    """
    info = slurm.job_info(job_id)
    tasks = []
    for name in names:
        s = watch.status.get(name) or {}
        kind, _, index = name.rpartition("-")
        earlier = watch.earlier.get(name, {})
        preempted = is_preemption(s.get("exit_code")) and reason is Reason.SUCCEEDED  # not by our own scancel
        killed = name in (ended or {})
        tasks.append(TaskResult(name=name, task_type=kind, index=int(index), exit_code=s.get("exit_code"),
                                restarts=s.get("restarts", 0) + resubmits,
                                stopped=(s.get("state") in (None, "RUNNING") and not killed)
                                or s.get("state") == "STOPPED" or (is_preemption(s.get("exit_code")) and not preempted),
                                log_path=job_dir / "logs" / f"{name}.log",
                                preemptions=resubmits + earlier.get("preemptions", 0) + s.get("preemptions", 0)
                                + int(preempted)))
    chief = tasks[0]
    alone = watch.restarts("preemptions"), watch.restarts("failures")  # tasks restarted alone, by cause
    where = f"Slurm job {job_id} ({info.get('JobState', 'gone')}, nodes {info.get('NodeList', '?')})"

    def end(code: int, why: Reason, message: str, preemptions: int = resubmits + alone[0],
            failures: int = alone[1]) -> LaunchResult:  # counts: what the launch acted on
        return LaunchResult(code, why, f"{where}: {message}", tuple(tasks), duration, job_dir, resubmits,
                            preemptions=preemptions, failures=failures)

    if reason is Reason.TIMEOUT:
        return end(124, reason, f"timed out after {spec.timeout:g} s")
    if reason is Reason.INTERRUPTED:
        return end(143, reason, "cancelled")
    if chief.exit_code is None:
        return end(1, Reason.FAILED, f"{chief.name} never reported an exit code\n"
                   f"{_tail(job_dir / 'slurm' / 'batch.log')}", failures=alone[1] + 1)
    code = shell_exit_code(chief.exit_code)
    preemptions = resubmits + alone[0] + int(is_preemption(chief.exit_code))
    if code == 0:
        return end(0, Reason.SUCCEEDED, f"{chief.name} finished", preemptions)
    if is_preemption(chief.exit_code):
        return end(EXIT_PREEMPTED, Reason.PREEMPTED, f"{chief.name} was preempted (exit {code}) and the job ends "
                   f"as preempted after {preemptions} preemption(s) (max_preemptions={spec.max_preemptions}; a job "
                   "is submitted again only if it resumes from its checkpoint)", preemptions)
    return end(code, Reason.FAILED, f"{chief.name} exited with {code}\n{_tail(chief.log_path)}", preemptions,
               alone[1] + 1)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""

