"""What trial early stopping saves: the same 8-trial digits study with and without it.

Runs the example trainer (``examples/trainer``: the digits MLP with
``toolkit.fit``, validated every epoch) as a tuning job on the local backend,
8 trials, 2 at a time, TPE, twice: once with ``enableTrialEarlyStopping: true``
(the median pruner, its defaults: no stop before 3 measurements, nor before 2
trials have finished) and once without. Both studies run under the same job
name in their own ``TFDIST_HOME``, so the sampler has the same seed. For each it
prints:

- wall time from submit to the study's end;
- trial-steps: the training steps every trial ran, counted from its summaries
  (the largest step any scalar was written at); a stopped trial is counted one
  more epoch than it recorded, since it may have trained that far before its
  processes stopped, so the saving is a lower bound;
- the best objective (``val_accuracy``) and how many trials were stopped.

Then the saving against the target: at least 30% fewer trial-steps with a best
objective within 0.01 of the full study. Not a test: wall times on a shared
machine are noisy, and TPE's proposals depend on which trials finish first.

Usage:
    python benchmarks/bench_tuning.py [--epochs 30] [--batch-size 32] [--trials 8] [--parallel 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))

from toolkit.jobs import JobSpec, api  # noqa: E402
from toolkit.jobs.tuning import read_scalars  # noqa: E402

_NAME = "digits-tune"  # the same name (so the same seed) for both studies


def _spec(args: argparse.Namespace, job_dir: Path, early: bool) -> JobSpec:
    hyper = {"goal": "MAXIMIZE", "hyperparameterMetricTag": "val_accuracy", "maxTrials": args.trials,
             "maxParallelTrials": args.parallel, "maxFailedTrials": args.trials,
             "params": [{"parameterName": "learning_rate", "type": "DOUBLE", "minValue": 1e-5, "maxValue": 0.3,
                         "scaleType": "UNIT_LOG_SCALE"},
                        {"parameterName": "hidden_units", "type": "DISCRETE", "discreteValues": [8, 16, 32, 64]}]}
    if early:
        hyper["enableTrialEarlyStopping"] = True
    doc = {"trainingInput": {"scaleTier": "BASIC", "pythonModule": "trainer.task", "hyperparameters": hyper,
                             "args": ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]}}
    return JobSpec.from_dict(doc, job_id=_NAME, overrides={"packagePath": str(_ROOT / "examples" / "trainer"),
                                                           "jobDir": str(job_dir)})


def _study(args: argparse.Namespace, work: Path, early: bool) -> dict:
    home, job_dir = work / ("early" if early else "full") / "home", work / ("early" if early else "full") / "out"
    started = time.monotonic()
    api.submit(_spec(args, job_dir, early), home=home)
    while not (record := api.describe(_NAME, home=home)).is_final:
        time.sleep(1)
    wall = time.monotonic() - started
    output = record.details["trainingOutput"]
    full_steps = args.epochs * _steps_per_epoch(args.batch_size)
    steps, stopped = 0, 0
    for trial in output["trials"]:
        ran = max((p.step for points in read_scalars(job_dir / trial["trialId"]).values() for p in points),
                  default=0)
        if trial.get("isTrialStoppedEarly"):
            stopped += 1
            ran = min(full_steps, ran + _steps_per_epoch(args.batch_size))
        steps += ran
    best = output["bestTrial"]
    return {"state": str(record.state), "wall": wall, "steps": steps, "stopped": stopped,
            "best": best["finalMetric"]["objectiveValue"] if best else float("nan"),
            "best_params": best["hyperparameters"] if best else None, "trials": len(output["trials"])}


def _steps_per_epoch(batch_size: int) -> int:
    from toolkit import data
    return data.load("digits", split="train").steps_per_epoch(batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.trials} trials, {args.parallel} at a time, {args.epochs} epochs of "
          f"{_steps_per_epoch(args.batch_size)} steps each; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as tmp:
        results: dict[bool, dict] = {}
        for stopping in (False, True):
            results[stopping] = result = _study(args, Path(tmp), stopping)
            print(f"{'early stopping' if stopping else 'every trial to its end':24s} {result['state']:9s} "
                  f"wall {result['wall']:6.1f} s  trial-steps {result['steps']:6d}  stopped {result['stopped']}"
                  f"/{result['trials']}  best val_accuracy {result['best']:.4f} {result['best_params']}")
    full, early = results[False], results[True]
    saved = 1 - early["steps"] / full["steps"]
    gap = full["best"] - early["best"]
    print(f"trial-steps saved: {saved:.0%} (target >= 30%: {'met' if saved >= 0.3 else 'NOT met'}); "
          f"wall time {early['wall'] / full['wall']:.2f}x; best objective {gap:+.4f} below the full study's "
          f"(target within 0.01: {'met' if gap <= 0.01 else 'NOT met'}); load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
