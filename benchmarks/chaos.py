"""Chaos benchmark: kill tasks of a running job and check that it still ends exactly right.

Runs the digits job of ``benchmarks/chaos_task.py`` under ``tfdist launch``
(1 ps, 2 workers, a chief and an evaluator; 2 epochs of 80 steps, a checkpoint
every 20, keeping 2, so the evaluator also meets pruned checkpoints; restartable, so a lost ps or chief
restarts the cluster from its last checkpoint) many times. Each run kills one
target (a worker, the ps, the chief, the evaluator, or the launcher itself) at
a chosen moment (during start-up, mid-step, or while a checkpoint is being
written) with SIGKILL or SIGTERM, in some scenarios twice. A killed launcher
is started again on the same model directory, as a user would. The ``keras-*``
and ``estimator-*`` scenarios train the same digits with Keras' own
``model.fit`` or the graph-mode Estimator (``_chaos_jobs.py``; no evaluator),
each compared with its own front door's undisturbed run.

Per scenario it prints: runs, completed, hung (> 60 s without progress: no
new log output and no new checkpoint), final-step exact (the newest
checkpoint is named after, and holds, the configured last step, and the chief
reports it), checkpoint readable (the newest checkpoint restores into the
model), final accuracy (test split, from the newest checkpoint) minus the
undisturbed run's, orphans (task processes alive 30 s after their launcher
ended or died) and time to recover (kill -> the next checkpoint past the one
before the kill, or the job's end).

Target: 30 runs, 0 hangs, 0 orphans, 0 unreadable checkpoints; every completed
run's final step exact and its accuracy within 0.02 of the undisturbed run.
It is a benchmark, not a test: it prints numbers and exits 0 unless a run
broke a target (then 1). ``tests/cluster/test_chaos.py`` runs 3 scenarios.

Usage:
    python benchmarks/chaos.py [--runs 30] [--scenarios worker-kill-step,ps-kill-step,...] [--seed 0]
                               [--json out.json] [--keep DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _chaos_logs import check_preemption
from _chaos_report import fmt, met_target, preemption_table, summarize, table
from _chaos_scenarios import BASELINES, DEFAULT_SCENARIOS, PREEMPTION_SCENARIOS, SCENARIOS, JobShape, RunResult, job_of

_REPO = Path(__file__).resolve().parents[1]
_TASK = _REPO / "benchmarks" / "chaos_task.py"
HANG_SECONDS = 60.0
ORPHAN_SECONDS = 30.0
_POLL = 0.02


# ------------------------------------------------------------------ processes

def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _task_pids(job_dir: Path) -> dict[str, list[int]]:
    pids: dict[str, list[int]] = {}
    for pid_file in sorted((job_dir / "tasks").glob("*/pid-*")):
        text = pid_file.read_text().strip()
        if text.isdigit():
            pids.setdefault(pid_file.parent.name, []).append(int(text))
    return pids


def _current_pid(job_dir: Path, task: str) -> int | None:
    files = sorted((job_dir / "tasks" / task).glob("pid-*"), key=lambda p: int(p.name.split("-")[1]))
    for pid_file in reversed(files):
        text = pid_file.read_text().strip()
        if text.isdigit() and _alive(int(text)):
            return int(text)
    return None


def _launcher_cmd(job_dir: Path, model_dir: Path, shape: JobShape, layout: str = "ps", job: str = "fit") -> list[str]:
    tasks = ["--ps", "1", "--workers", "2"] if layout == "ps" else ["--workers", "2"]
    evaluator = shape.evaluator and job == "fit"  # the Keras and Estimator jobs train on every task, none evaluates
    return [sys.executable, "-m", "toolkit", "launch", *tasks,
            *(["--evaluator"] if evaluator else []), *(["--preload"] if shape.preload else []),
            "--restartable", "--max-restarts", "4", "--grace-period", f"{shape.grace_period:g}", "--timeout", "900",
            "--quiet",
            "--job-dir", str(job_dir), "--", sys.executable, str(_TASK), "--model-dir", str(model_dir),
            "--epochs", str(shape.epochs), "--steps-per-epoch", str(shape.steps_per_epoch),
            "--checkpoint-every", str(shape.checkpoint_every), "--job", job]


def _start_launcher(job_dir: Path, model_dir: Path, shape: JobShape, layout: str = "ps",
                    job: str = "fit") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("TF_CONFIG", None)
    with open(job_dir.parent / f"{job_dir.name}-launcher.log", "ab") as log:  # the child keeps its own copy
        return subprocess.Popen(_launcher_cmd(job_dir, model_dir, shape, layout, job), cwd=_REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


# ------------------------------------------------------------------ observation

def _checkpoint_steps(model_dir: Path) -> list[int]:
    steps = []
    for index in model_dir.glob("*ckpt-*.index"):  # ckpt-N (fit, Keras' backup), model.ckpt-N (the Estimator)
        number = index.name.split("ckpt-", 1)[1][:-len(".index")]
        if number.isdigit():
            steps.append(int(number))
    return sorted(steps)


def _progress(job_dir: Path, model_dir: Path) -> tuple[int, tuple[int, ...]]:
    size = sum(p.stat().st_size for p in (job_dir / "logs").glob("*.log") if p.exists())
    return size, tuple(_checkpoint_steps(model_dir))


def _writing_checkpoint(model_dir: Path) -> int | None:
    """The step of a save in flight (TensorFlow writes ``<prefix>_temp/`` shards, then renames them), or None."""
    for path in model_dir.glob("*ckpt-*_temp*"):
        number = path.name.split("ckpt-", 1)[1].split("_temp")[0]
        if number.isdigit():
            return int(number)
    return None


class _Watch:
    """Polls a job for progress; says when it hung."""

    def __init__(self, job_dir: Path, model_dir: Path) -> None:
        self.job_dir, self.model_dir = job_dir, model_dir
        self.last, self.last_change = _progress(job_dir, model_dir), time.monotonic()

    def hung(self) -> bool:
        now = _progress(self.job_dir, self.model_dir)
        if now != self.last:
            self.last, self.last_change = now, time.monotonic()
        return time.monotonic() - self.last_change > HANG_SECONDS


# ------------------------------------------------------------------ one run

def _wait_for_moment(moment: str, target: str, job_dir: Path, model_dir: Path, proc: subprocess.Popen,
                     rng: random.Random, after_step: int, shape: JobShape) -> bool:
    """Returns when it is time to kill (False if the job ended first)."""
    deadline, seen, missed = time.monotonic() + 600, None, 0
    while time.monotonic() < deadline and proc.poll() is None:
        steps = _checkpoint_steps(model_dir)
        newest = steps[-1] if steps else 0
        if moment == "checkpoint" and newest != seen:
            missed, seen = missed + (seen is not None and newest > after_step), newest
            if missed >= 3:  # writes too quick to catch in flight: kill just after one lands instead
                return True
        # a target killed before must have been restarted (its new pid file written) before the next kill
        alive = target == "launcher" or _current_pid(job_dir, target) is not None
        last_window = shape.total_steps // 2 if not after_step else shape.total_steps - shape.checkpoint_every
        if alive and moment == "startup":
            time.sleep(rng.uniform(0.0, 4.0))  # importing TensorFlow, connecting
            return True
        if alive and moment == "step" and after_step < newest <= last_window:
            time.sleep(rng.uniform(0.0, 0.5))  # somewhere in the steps after that checkpoint
            return True
        if alive and moment == "checkpoint" and newest > after_step and _writing_checkpoint(model_dir) is not None:
            return True
        time.sleep(_POLL)
    return False


def _kill(target: str, sig: int, job_dir: Path, proc: subprocess.Popen) -> str:
    if target == "launcher":
        os.kill(proc.pid, sig)
        return f"launcher({proc.pid})"
    pid = _current_pid(job_dir, target)
    if pid is None:
        return f"{target}(gone)"
    os.kill(pid, sig)
    return f"{target}({pid})"


def _wait_recovered(model_dir: Path, before: int, proc: subprocess.Popen, watch: _Watch) -> float | None:
    """Seconds until a checkpoint past ``before`` (or the job's end); None if it hung."""
    start = time.monotonic()
    while True:
        steps = _checkpoint_steps(model_dir)
        if (steps and steps[-1] > before) or proc.poll() is not None:
            return time.monotonic() - start
        if watch.hung():
            return None
        time.sleep(_POLL * 5)


def _reap_tasks(job_dir: Path, within: float) -> int:
    """Waits up to ``within`` s for the job's tasks to be gone; kills and counts the ones left."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [pid for pids in _task_pids(job_dir).values() for pid in pids if _alive(pid)]
        if not left:
            return 0
        time.sleep(0.2)
    left = [pid for pids in _task_pids(job_dir).values() for pid in pids if _alive(pid)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(left)


def _finish(proc: subprocess.Popen, job_dir: Path, model_dir: Path, watch: _Watch, result: RunResult) -> None:
    while proc.poll() is None:
        if watch.hung():
            result.hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.2)
    result.orphans += _reap_tasks(job_dir, ORPHAN_SECONDS)


def run_once(name: str, root: Path, rng: random.Random, shape: JobShape | None = None) -> RunResult:
    shape = shape if shape is not None else JobShape()
    scenario = SCENARIOS[name]
    result, started = RunResult(name), time.monotonic()
    job_dir, model_dir = root / "job", root / "model"
    root.mkdir(parents=True, exist_ok=True)
    layout, job = (scenario.layout, scenario.job) if scenario else ("ps", "fit")
    proc = _start_launcher(job_dir, model_dir, shape, layout, job)
    watch = _Watch(job_dir, model_dir)
    after = 0
    for _ in range(scenario.kills if scenario else 0):
        if not _wait_for_moment(scenario.moment, scenario.target, job_dir, model_dir, proc, rng, after, shape):
            result.note = "the job ended before the kill"
            break
        # recovered = a checkpoint past the newest one, or past the one being written at the kill
        before = max((_checkpoint_steps(model_dir) or [0])[-1], _writing_checkpoint(model_dir) or 0)
        result.kills.append(f"{_kill(scenario.target, scenario.sig, job_dir, proc)}@ckpt-{before}")
        if scenario.target == "launcher":
            proc.wait()
            result.orphans += _reap_tasks(job_dir, ORPHAN_SECONDS)  # every task must die with it
            job_dir = root / "job-resumed"
            proc = _start_launcher(job_dir, model_dir, shape, layout, job)
            watch = _Watch(job_dir, model_dir)
        recovered = _wait_recovered(model_dir, before, proc, watch)
        if recovered is None:
            result.hung = True
            break
        result.recover_seconds.append(recovered)
        after = (_checkpoint_steps(model_dir) or [0])[-1]
    _finish(proc, job_dir, model_dir, watch, result)
    result.completed = proc.returncode == 0 and not result.hung
    _check_artifacts(model_dir, root, result, shape.total_steps, job)
    if scenario is not None and scenario.preemption and result.kills:
        check_preemption(job_dir, result, scenario.target, job)
    result.duration = time.monotonic() - started
    return result


# ------------------------------------------------------------------ artifacts

def _check_artifacts(model_dir: Path, root: Path, result: RunResult, total_steps: int, job: str = "fit") -> None:
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(model_dir))
    if latest is None:
        result.note = result.note or "no checkpoint"
        return
    reported = json.loads((root / "result.json").read_text()) if (root / "result.json").exists() else {}
    try:
        if job == "estimator":  # its own variable names: read the step, take the chief's test accuracy
            accuracy, step = reported.get("accuracy"), int(tf.train.load_variable(latest, "global_step"))
        else:
            accuracy, step = _evaluate(latest)
    except (tf.errors.OpError, ValueError, AssertionError) as exc:
        result.note = f"unreadable: {str(exc).splitlines()[0][:120]}"
        return
    result.readable, result.accuracy = True, accuracy
    reported = reported.get("global_step")
    result.exact = latest.endswith(f"ckpt-{total_steps}") and step == total_steps == reported
    if result.completed and not result.exact:
        result.note = f"final step: checkpoint {os.path.basename(latest)}, variable {step}, chief {reported}"


_EVAL: dict[str, Any] = {}


def _evaluate(path: str) -> tuple[float, int]:
    """Test accuracy and global step of checkpoint ``path`` (restored into a fresh model)."""
    import numpy as np
    import tensorflow as tf

    import models
    from toolkit import data

    if not _EVAL:
        test = data.load("digits", split="test")
        _EVAL.update(x=np.asarray(test.features, np.float32), y=np.asarray(test.labels))
    model = models.digits_mlp(seed=0)
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(model=model, global_step=step).restore(path).expect_partial().assert_existing_objects_matched()
    predictions = np.argmax(model.predict(_EVAL["x"], verbose=0), axis=-1)
    return float(np.mean(predictions == _EVAL["y"])), int(step.numpy())


# ------------------------------------------------------------------ report

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="disturbed runs, spread over the scenarios (default 30)")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help=f"comma-separated, from: {', '.join(DEFAULT_SCENARIOS)}")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill moments (default 0)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the undisturbed run (no accuracy deltas)")
    parser.add_argument("--epochs", type=int, default=JobShape.epochs, help="epochs of the job (default 2)")
    parser.add_argument("--steps-per-epoch", type=int, default=JobShape.steps_per_epoch, help="default 80")
    parser.add_argument("--checkpoint-every", type=int, default=JobShape.checkpoint_every, help="default 20")
    parser.add_argument("--no-evaluator", action="store_true", help="run the job without its evaluator task")
    parser.add_argument("--grace-period", type=float, default=JobShape.grace_period,
                        help="the launcher's grace period after the chief ends (default 15 s)")
    parser.add_argument("--preload", action="store_true", help="fork the tasks from one TensorFlow import")
    parser.add_argument("--json", default=None, help="also write every run and the table here")
    parser.add_argument("--keep", default=None, help="keep the runs' directories under this directory")
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or args.runs < 1:
        parser.error(f"unknown scenario(s) {unknown}; valid: {', '.join(SCENARIOS)}" if unknown
                     else f"--runs is {args.runs}; expected at least 1")
    rng = random.Random(args.seed)
    shape = JobShape(epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, checkpoint_every=args.checkpoint_every,
                     evaluator=not args.no_evaluator, grace_period=args.grace_period, preload=args.preload)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tfdist-chaos-"))
    baselines = [] if args.no_baseline else [BASELINES[j] for j in dict.fromkeys(job_of(n) for n in names)]
    plan = baselines + [names[i % len(names)] for i in range(args.runs)]  # each front door's undisturbed run first
    results = []
    for i, name in enumerate(plan):
        result = run_once(name, root / f"run-{i:02d}-{name}", rng, shape)
        results.append(result)
        print(f"run {i:2d} {name:<24} completed={result.completed} hung={result.hung} exact={result.exact} "
              f"readable={result.readable} accuracy={fmt(result.accuracy, '.3f')} orphans={result.orphans} "
              f"kills={','.join(result.kills) or '-'} recover={[round(s, 1) for s in result.recover_seconds]} "
              f"redone={fmt(result.steps_redone)} codes={result.exit_codes} counted={result.counted or '-'} "
              f"{result.duration:.0f}s {result.note}", flush=True)
        if args.json:  # after every run, so an interrupted benchmark keeps what it measured
            Path(args.json).write_text(json.dumps({"runs": [dataclasses.asdict(r) for r in results]}, indent=2))
    baseline = {job_of(r.scenario): r.accuracy for r in results if r.scenario in BASELINES.values()}
    disturbed = [r for r in results if r.scenario not in BASELINES.values()]
    rows = summarize(disturbed, baseline)
    print()
    undisturbed = ", ".join(f"{job} {fmt(accuracy, '.3f')}" for job, accuracy in baseline.items()) or "-"
    print(f"undisturbed accuracy: {undisturbed}; {len(disturbed)} disturbed runs, seed {args.seed}")
    print(table(rows))
    if any(r.scenario in PREEMPTION_SCENARIOS for r in disturbed):
        print()
        print(preemption_table(disturbed))
    ok = met_target(disturbed, baseline)
    print("target met" if ok else "target NOT met")
    if args.json:
        Path(args.json).write_text(json.dumps({"baseline_accuracy": baseline, "rows": rows, "target_met": ok,
                                               "runs": [dataclasses.asdict(r) for r in results]}, indent=2))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
