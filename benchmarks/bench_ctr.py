"""Parameter servers on the workload they exist for: a wide & deep click-through model, tfdist against TF1.

Runs in one run, each on 2 ps + 2 workers on loopback (plus the chief where the path has one):

* ``tf1_peer``: ``shared/peers/tf1_ctr_ps.py`` beside the checkout (``--peer PATH``; skipped with
  a message if absent): between-graph TF1, ``replica_device_setter``, ``fixed_size_partitioner``,
  Adagrad with sparse row updates, trained for ``--seconds``;
* ``toolkit_fit``: ``toolkit.fit`` on ``models.ctr`` with plain ``keras.layers.Embedding`` tables;
* ``keras_fit``: Keras' own ``model.fit``, TensorFlow's parameter-server tutorial style, under
  ``toolkit.enable_distributed_keras()``;
* ``toolkit_fit_sharded``: ``toolkit.fit`` with ``toolkit.layers.ShardedEmbedding`` tables and the
  knobs docs/model_parallel.md gives (``min_size`` partitioner, ``ShardedTrainStep`` with
  ``SparseAdagrad``);
* ``estimator``: ``tf.estimator.DNNLinearCombinedClassifier`` (``import toolkit.compat.v1 as tf``)
  with ``embedding_column``s and ``input_layer_partitioner=fixed_size_partitioner(2)``, between-graph
  on a chief and one worker (its two training tasks); ``estimator_model_fn``: the same with a
  custom ``model_fn``, the peer's graph on partitioned ``get_variable`` tables (``_ctr_estimator.py``).

Same data (``toolkit.data.criteo_like``, the generator the peer uses), model, optimizer
(Adagrad 0.05, accumulator 0.1) and batch (512 per worker step). The tfdist paths train exactly
as many examples as the peer did in its run (``--examples`` overrides), so their held-out log
losses (20,000 examples, seed 999) compare after equal examples. Per path it prints:

* examples/s over a timed window: the peer's own (35 s after its first step to its end); for the
  tfdist paths from the first epoch end 35 s (at most 30% of the run) after the first one to the end;
* held-out log loss and the base rate's, and the examples trained;
* peak RSS (``VmHWM``) of each task's process, sampled from ``/proc`` every 0.5 s;
* CPU-seconds per 1,000 examples: user + system time of all the job's task processes over the
  timed window (for the peer, whose window is not printed, the ``--seconds - 35`` seconds that end
  1 s before its result line), divided by the examples trained in it;
* the ratios against the peer and the issue's targets.

Not a test: the machine is shared, so compare ratios from one run.

Usage:
    python benchmarks/bench_ctr.py [--seconds 80] [--vocab 100000] [--only tf1_peer toolkit_fit ...]
                                   [--examples N] [--steps-per-execution 16] [--json FILE] [--peer PATH]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(_REPO))

from _ctr_paths import write_training_data  # noqa: E402
from _ctr_sampling import TaskSampler, peer_task_name  # noqa: E402
from _proc import task_name  # noqa: E402

BATCH, WARMUP_SECS, EPOCHS = 512, 35.0, 20
#: compile's steps_per_execution in the Keras paths, as a Keras user sets it for small steps
STEPS_PER_EXECUTION = 16
PATHS = ("tf1_peer", "toolkit_fit", "keras_fit", "toolkit_fit_sharded", "estimator", "estimator_model_fn")
#: the issue's targets: examples/s ratio against the peer; CPU per example at most 0.7x the peer's
SPEED_TARGETS = {"toolkit_fit": 1.5, "keras_fit": 1.2, "toolkit_fit_sharded": 1.5, "estimator": 1.0,
                 "estimator_model_fn": 1.0}
CPU_TARGET, LOGLOSS_BAND = 0.7, 0.01


def _peer_path(given: str | None) -> Path | None:
    if given:
        return Path(given)
    for root in (_REPO.parent, _REPO.parent.parent):
        candidate = root / "shared" / "peers" / "tf1_ctr_ps.py"
        if candidate.exists():
            return candidate
    return None


def _run_peer(path: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """The peer as its authors run it; its window's CPU is read from the samples (see the module doc)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen([sys.executable, str(path), "--workers", "2", "--ps", "2", "--vocab", str(args.vocab),
                             "--seconds", str(args.seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    lines: list[tuple[float, str]] = []
    errors: list[str] = []
    readers = [threading.Thread(target=lambda: lines.extend((time.time(), line) for line in proc.stdout or ()),
                                daemon=True),
               threading.Thread(target=lambda: errors.extend(proc.stderr or ()), daemon=True)]
    for reader in readers:
        reader.start()
    with TaskSampler(proc.pid, peer_task_name) as sampler:
        try:
            proc.wait(timeout=args.seconds + 600)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(10)
    found = [(t, json.loads(line)) for t, line in lines if line.startswith("{")]
    if proc.returncode or not found:
        print(f"  tf1_peer failed (exit {proc.returncode}):\n{''.join(errors)[-1500:]}", file=sys.stderr)
        return None
    t_line, result = found[-1]
    end = t_line - 1.0
    start = end - max(1.0, args.seconds - WARMUP_SECS)
    rate = result["global_examples_per_s"]
    cpu = sampler.cpu_between(start, end)
    return {"examples_per_s": rate, "joined_s": _stagger(sampler, ("worker-0", "worker-1"), end),
            "logloss": result["eval_logloss"], "base_logloss": result["base_rate_logloss"],
            "examples": result["global_steps"] * BATCH, "rss_mib": sampler.peak_rss_mib(),
            "cpu_per_1k": None if cpu is None else 1000 * cpu / (rate * (end - start)),
            "cpu_per_1k_by_task": {name: round(1000 * seconds / (rate * (end - start)), 4)
                                   for name, seconds in sampler.cpu_between_by_task(start, end).items()}}


def _stagger(sampler: TaskSampler, trainers: tuple[str, ...], end: float) -> float | None:
    """How much later the last training task's final busy stretch began than the first's (None if not read).

    A task busy from its start-up to the end of training has one stretch. The peer's second worker
    usually trains only after TF1's SessionManager has polled it ready, 30 s after its first try: its
    start-up, an idle wait, then training. Until then one worker trains alone, with no stale gradients.
    Busy is judged over 5 s: five tasks starting on 2 cores each take ~0.4 of a core, and the second or
    so of near-idle between a task's start-up and its graph building would otherwise split its stretch.
    """
    began = [sampler.busy_since(name, end, span=5.0) for name in trainers]
    known = [when for when in began if when is not None]
    return max(known) - min(known) if len(known) == len(began) else None


def _window(marks: list[list[float]]) -> tuple[float, float, int]:
    """(start, end, steps) of the timed window over the epoch-end marks ``[time, global_step]``."""
    first = marks[1] if len(marks) > 2 else marks[0]  # the first epoch traces and warms up
    last = marks[-1]
    warmup = min(WARMUP_SECS, 0.3 * (last[0] - first[0]))
    start = next(m for m in marks if m[0] >= first[0] + warmup)
    if start is last:
        start = first
    return start[0], last[0], int(last[1] - start[1])


def _run_tfdist(path: str, args: argparse.Namespace, steps: int, work: Path) -> dict[str, Any] | None:
    from toolkit.launcher import launch

    out = work / f"{path}.json"
    estimator = path.startswith("estimator")
    child = "_ctr_estimator.py" if estimator else "bench_ctr.py"
    cmd = [sys.executable, str(Path(__file__).resolve().parent / child), "--child", path, "--out", str(out),
           "--steps", str(steps), "--epochs", str(EPOCHS), "--vocab", str(args.vocab),
           "--model-dir", str(work / path / "model"), "--data-dir", str(work / "data")]
    if not estimator:
        cmd += ["--steps-per-execution", str(args.steps_per_execution)]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(_REPO)}
    # the Estimator's chief trains (as TF1's worker 0 did): chief + 1 worker are its two workers
    shape = {"chief": 1, "workers": 1 if estimator else 2, "ps": 2}
    with TaskSampler(os.getpid(), task_name) as sampler:
        result = launch(cmd, job_dir=work / path / "job", timeout=args.timeout, echo=False, env=env, **shape)
    if not out.exists():
        print(f"  {path} failed: {result.message} (logs in {work / path / 'job'})", file=sys.stderr)
        return None
    if not result.ok:  # trained and evaluated, then ended badly: the figures stand, the failure is shown
        print(f"  {path}: the job ended badly after its chief's results: {result.message}", file=sys.stderr)
    found = json.loads(out.read_text())
    start, end, window_steps = _window(found["marks"])
    examples = window_steps * BATCH
    cpu = sampler.cpu_between(start, end)
    trainers = ("chief-0", "worker-0") if estimator else ("worker-0", "worker-1")
    return {"examples_per_s": examples / (end - start), "logloss": found["logloss"],
            "joined_s": _stagger(sampler, trainers, end),
            "base_logloss": found["base_logloss"], "examples": int(found["marks"][-1][1]) * BATCH,
            "rss_mib": sampler.peak_rss_mib(), "cpu_per_1k": None if cpu is None else 1000 * cpu / examples,
            "cpu_per_1k_by_task": {name: round(1000 * seconds / examples, 4)
                                   for name, seconds in sampler.cpu_between_by_task(start, end).items()}}


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _report(results: dict[str, dict[str, Any] | None]) -> list[str]:
    peer = results.get("tf1_peer")
    lines = [f"{'path':22s} {'examples/s':>10s} {'vs peer':>8s} {'log loss':>8s} {'(base)':>7s} {'examples':>9s} "
             f"{'CPU-s/1k':>8s} {'vs peer':>8s} {'2nd in':>6s}  peak RSS per task (MiB)"]
    for name, row in results.items():
        if row is None:
            lines.append(f"{name:22s} failed or skipped")
            continue
        speed = row["examples_per_s"] / peer["examples_per_s"] if peer else None
        cpu = (row["cpu_per_1k"] / peer["cpu_per_1k"]) if peer and row["cpu_per_1k"] and peer["cpu_per_1k"] else None
        rss = ", ".join(f"{task} {mib:.0f}" for task, mib in sorted(row["rss_mib"].items()))
        lines.append(f"{name:22s} {row['examples_per_s']:10.0f} {_fmt(speed, '7.2f') + 'x':>8s} "
                     f"{row['logloss']:8.4f} {row['base_logloss']:7.3f} {row['examples']:9d} "
                     f"{_fmt(row['cpu_per_1k'], '8.3f')} {_fmt(cpu, '7.2f') + 'x':>8s} "
                     f"{_fmt(row.get('joined_s'), '5.1f') + 's':>6s}  {rss}")
    lines += ["", "2nd in: how much later the second training task was busy for good than the first",
              "(start-ups included; a task waiting to train is idle). The peer's second worker usually",
              "waits out TF1's 30 s readiness poll, so one worker trains alone (no stale gradients) for",
              "about the first half of its steps: at equal examples that lowers its log loss",
              "(benchmarks/RESULTS.md).",
              "log loss: tfdist's paths are evaluated on their final weights; the peer while its other",
              "worker trains on. The final weights' offset swings from step to step in both: frozen at",
              "equal examples, the peer's own runs spread 0.4561-0.4700 (RESULTS.md)."]
    if peer:
        lines += ["", "targets (ratios against the peer, this run):"]
        for name, target in SPEED_TARGETS.items():
            row = results.get(name)
            if not row:
                continue
            speed = row["examples_per_s"] / peer["examples_per_s"]
            gap = row["logloss"] - peer["logloss"]
            cpu = row["cpu_per_1k"] / peer["cpu_per_1k"] if row["cpu_per_1k"] and peer["cpu_per_1k"] else None
            lines.append(f"  {name:22s} speed {speed:5.2f}x [>= {target}x] {'met' if speed >= target else 'NOT MET':7s}"
                         f"  log loss {gap:+.4f} [<= {LOGLOSS_BAND}] {'met' if gap <= LOGLOSS_BAND else 'NOT MET':7s}"
                         f"  CPU {_fmt(cpu, '5.2f')}x [<= {CPU_TARGET}x] "
                         f"{'n/a' if cpu is None else 'met' if cpu <= CPU_TARGET else 'NOT MET'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=80.0, help="the peer's training time (default 80)")
    parser.add_argument("--vocab", type=int, default=100_000, help="ids per feature; tables are 26 x vocab rows")
    parser.add_argument("--only", nargs="*", choices=PATHS, default=None, help="run only these paths")
    parser.add_argument("--examples", type=int, default=None,
                        help="examples every tfdist path trains (default: as many as the peer did, else 12,000 "
                             "per --seconds)")
    parser.add_argument("--steps-per-execution", type=int, default=STEPS_PER_EXECUTION,
                        help="what the Keras paths' model.compile sets (default %(default)s; the peer runs one step "
                             "per session.run)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--peer", default=None, help="the TF1 click-through peer script")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per path")
    parser.add_argument("--keep", default=None, help="work in this directory and keep it (the tasks' logs)")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the data is drawn here, through toolkit.data
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} cores, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}; "
          f"vocab {args.vocab} (tables of {26 * args.vocab:,} rows), 2 ps + 2 workers, batch {BATCH}", flush=True)
    results: dict[str, dict[str, Any] | None] = {}
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    work = contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="bench-ctr-")
    with work as tmp:
        if not args.only or set(args.only) - {"tf1_peer"}:
            (Path(tmp) / "data").mkdir()
            write_training_data(Path(tmp) / "data", args.vocab, workers=2)
        for path in PATHS:
            if args.only and path not in args.only:
                continue
            started = time.perf_counter()
            if path == "tf1_peer":
                peer = _peer_path(args.peer)
                if peer is None or not peer.exists():
                    print(f"  tf1_peer: {peer or 'shared/peers/tf1_ctr_ps.py'} not found; skipped (pass --peer PATH)",
                          file=sys.stderr)
                    continue
                results[path] = _run_peer(peer, args)
            else:
                peer_row = results.get("tf1_peer")
                examples = args.examples or (peer_row["examples"] if peer_row else int(12_000 * args.seconds))
                steps = EPOCHS * -(-examples // (BATCH * EPOCHS))  # whole epochs, at least the examples asked
                results[path] = _run_tfdist(path, args, steps, Path(tmp))
            row = results[path]
            shown = (f"{row['examples_per_s']:8.0f} examples/s, log loss {row['logloss']:.4f}" if row else "failed")
            print(f"{path:22s} {shown}   ({time.perf_counter() - started:.0f} s, load "
                  f"{' '.join(f'{v:.1f}' for v in os.getloadavg())})", flush=True)
    print()
    print("\n".join(_report(results)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if results and all(results.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        from _ctr_paths import child

        child(sys.argv[2:])
    else:
        sys.exit(main())
