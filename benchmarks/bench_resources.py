"""A task's memory and a job's start-up, against one ``import tensorflow`` measured in the same run.

Three measurements, each printed against its target with met / not met:

1. **Floor**: peak RSS (``VmHWM``) of ``python -c "import tensorflow"``, and the time from
   spawning one process that imports TensorFlow and starts a ``tf.distribute.Server`` until its
   port answers (the start-up reference).
2. **Memory**: ``tfdist demo`` (1 chief, 2 workers, 1 ps; the real CLI in a subprocess; its tasks are
   forked from one preload process, ``--no-preload`` also measures fresh interpreters). Every
   task's ``VmHWM`` is read from ``/proc/<pid>/status`` every 50 ms while it runs (the high-water
   mark only grows, so the last read is the peak up to a few ms before the exit).
   Target: every task <= 650 MiB. Reported beside it: each task's PSS in the sample where the
   job's total PSS was highest. RSS counts TensorFlow's shared library pages in full in every
   task; PSS splits them between the tasks that map them, so the four add up to what the job uses.
3. **Start-up**: ``tfdist launch --workers 2 --ps 1 -- python <script>``, where the script is
   the demo's (``toolkit.demo``) with a callback that stamps the first ``on_train_batch_end``
   (``steps_per_execution=1``; under parameter servers the chief sees the steps in chunks, so
   this is the end of the first chunk it waits for, 8 steps in the demo: a little after the
   first step). Target: launch to first step <= 1.3x the reference of (1). The chief's own
   marks (interpreter up, TensorFlow and Keras imported, strategy connected, first step) show
   where the time goes. ``--between-graph`` runs the demo with ``fit(options=FitOptions(between_graph=True))``: the
   workers build and run the steps, the chief traces none.

Not a test: on a shared machine the timings are noisy, so the load average is printed with
each figure; compare figures within one run.

Usage:
    python benchmarks/bench_resources.py [--runs 2] [--skip-demo] [--skip-startup] [--between-graph] [--preload]
                                           [--no-preload]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _proc import PolledRun

_MIB = 1024 * 1024
_MEMORY_TARGET_MIB = 650
_STARTUP_TARGET = 1.3

_FLOOR = """\
import time
import tensorflow
with open('/proc/self/status') as fh:
    hwm = next(int(line.split()[1]) for line in fh if line.startswith('VmHWM'))
print(hwm * 1024)
"""

_SERVER = """\
import sys
import tensorflow as tf
server = tf.distribute.Server({"ps": ["127.0.0.1:%d"]}, job_name="ps", task_index=0, start=True)
sys.stdin.read()
"""

# The demo's script with a first-step stamp: one step per execution, one short epoch.
_FIRST_STEP = """\
import atexit, json, os, sys, time
def _rss():
    with open("/proc/self/status") as fh:
        return int(next(line for line in fh if line.startswith("VmRSS")).split()[1]) // 1024
marks, rss = {"interpreter": time.time()}, {}
out = os.path.join(os.environ["TFDIST_JOB_DIR"], "marks-" + os.environ["TFDIST_TASK_NAME"] + ".json")
def _mark(name):
    marks[name], rss[name] = time.time(), _rss()
def _save():
    _mark("exit")
    with open(out, "w") as fh:
        json.dump({"marks": marks, "rss": rss}, fh)
from toolkit import demo
from tf_config import TFConfig
from strategies import is_server_role
if is_server_role(TFConfig.from_env()):
    sys.exit(demo.main(sys.argv[1:]))
atexit.register(_save)
from strategies import TRAINER_UNUSED_MODULES, skip_imports
skip_imports(TRAINER_UNUSED_MODULES)  # what demo.main does first in a chief; it is too late after `import keras`
import keras
import tensorflow as tf
_mark("imported")
import strategies
_make = strategies.make_strategy
def _timed_make(*args, **kwargs):
    strategy = _make(*args, **kwargs)
    _mark("connected")
    return strategy
strategies.make_strategy = _timed_make
class FirstStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if "first_step" not in marks:
            _mark("first_step")
    def on_train_end(self, logs=None):
        _mark("trained")
sys.exit(demo.main(sys.argv[1:], callbacks=[FirstStep()]))
"""


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _env() -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def floor() -> dict[str, float]:
    """Peak RSS of a bare ``import tensorflow``, and spawn -> server listening for one process."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _FLOOR], check=True, capture_output=True, text=True, timeout=300,
                         env=_env())
    import_s = time.perf_counter() - started
    return {"rss_mib": int(out.stdout.split()[-1]) / _MIB, "import_s": import_s, "server_s": server_start()}


def server_start() -> float:
    """The start-up reference: seconds from spawning one process to its TensorFlow server's port answering."""
    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _SERVER % port], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    try:
        while not _listening(port):
            if proc.poll() is not None or time.perf_counter() - started > 300:
                raise SystemExit("the reference server did not start")
            time.sleep(0.01)
        return time.perf_counter() - started
    finally:
        proc.communicate(b"", timeout=30)


def _read_kib(path: str, field: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field))
    except (OSError, StopIteration):
        return None


def _hwm(pid: int) -> int | None:
    return _read_kib(f"/proc/{pid}/status", "VmHWM:")


def _pss(pid: int) -> int | None:
    """Proportional set size: each shared page (TensorFlow's libraries, mapped by every task) counted once per job."""
    return _read_kib(f"/proc/{pid}/smaps_rollup", "Pss:")


def demo_memory(tmp: Path, *, preload: bool = True) -> dict[str, dict[str, float]]:
    """Peak RSS per task of ``tfdist demo``, and each task's PSS when the job's total PSS peaked.

    ``tfdist demo`` forks its tasks from a preload process; its figures are under ``preload`` (not a task:
    it only imported TensorFlow and Keras, and its pages are shared with every task). ``preload=False``:
    ``--no-preload``, a fresh interpreter per task.
    """
    run = PolledRun([sys.executable, "-m", "toolkit", "demo", "--dir", str(tmp / f"demo-{int(preload)}"),
                     *([] if preload else ["--no-preload"])], env=_env(), interval=0.05)
    peaks: dict[str, int] = {}
    samples: list[dict[str, int]] = []
    for tasks in run.samples():
        sample: dict[str, int] = {}
        for pid, name in tasks.items():
            value = _hwm(pid)
            if value is not None:
                peaks[name] = max(peaks.get(name, 0), value)
            share = _pss(pid)
            if share is not None:
                sample[name] = share
        samples.append(sample)
    # each process's PSS in the sample where the job's total was highest, among the samples that saw every process
    complete = [sample for sample in samples if set(sample) == set(peaks)]
    pss = max(complete, key=lambda sample: sum(sample.values()), default={})
    if run.returncode != 0:
        raise SystemExit("tfdist demo failed:\n" + "".join(run.output[-30:]))
    accuracy = next((line.strip() for line in run.output if line.startswith("final test accuracy")), "?")
    print(f"  demo: {accuracy}")
    return {name: {"rss": value / _MIB, "pss": pss.get(name, 0) / _MIB} for name, value in sorted(peaks.items())}


def startup(tmp: Path, index: int, *, between_graph: bool = False, preload: bool = False) -> dict[str, float]:
    """Seconds from ``tfdist launch`` to the chief's marks (interpreter, imported, connected, first step)."""
    script = tmp / "first_step.py"
    script.write_text(_FIRST_STEP)
    job_dir = tmp / f"launch-{index}"
    cmd = [sys.executable, "-m", "toolkit", "launch", "--workers", "2", "--ps", "1", "--quiet", "--job-dir",
           str(job_dir), *(["--preload"] if preload else []), "--", "python", str(script), "--model-dir",
           str(job_dir / "model"), "--epochs", "1", "--steps-per-execution", "1",
           *(["--between-graph"] if between_graph else [])]
    started = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    total = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"launch failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads((job_dir / "marks-chief-0.json").read_text())
    print("  chief's RSS (MiB) at each mark: " + ", ".join(f"{k} {v}" for k, v in report["rss"].items()))
    return {key: value - started for key, value in report["marks"].items()} | {"job": total}


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="start-up runs (the median is reported)")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--between-graph", action="store_true",
                        help="also the start-up of fit(options=FitOptions(between_graph=True)), interleaved "
                             "with the coordinator's: the workers build and run the steps, the chief traces none")
    parser.add_argument("--no-preload", action="store_true",
                        help="also the memory of `tfdist demo --no-preload` (a fresh interpreter per task)")
    parser.add_argument("--preload", action="store_true",
                        help="also the start-up of each mode under `tfdist launch --preload` (every task forked "
                             "from one process that imported TensorFlow and Keras), interleaved")
    args = parser.parse_args()

    print(f"floor ({_load()})")
    ref = floor()
    reference = ref["server_s"]
    print(f"  python -c 'import tensorflow': peak RSS {ref['rss_mib']:.0f} MiB, {ref['import_s']:.2f} s")
    print(f"  one process: spawn -> import tensorflow -> server listening: {reference:.2f} s (the reference)")

    with tempfile.TemporaryDirectory(prefix="tfdist-bench-resources-") as name:
        tmp = Path(name)
        for preload in [] if args.skip_demo else [True, False] if args.no_preload else [True]:
            print(f"memory: tfdist demo{'' if preload else ' --no-preload'} ({_load()})")
            peaks = demo_memory(tmp, preload=preload)
            for task, mem in peaks.items():
                mib = mem["rss"]
                verdict = (f"target <= {_MEMORY_TARGET_MIB}: {_verdict(mib <= _MEMORY_TARGET_MIB)}"
                           if task != "preload" else "not a task: the process the tasks were forked from")
                print(f"  {task:10s} peak RSS {mib:5.0f} MiB  ({mib / ref['rss_mib']:.2f}x the import floor; "
                      f"{verdict}); PSS {mem['pss']:4.0f} MiB at the job's peak [report]")
            worst = max(mem["rss"] for task, mem in peaks.items() if task != "preload")
            total = sum(m["pss"] for m in peaks.values())
            print(f"  the job's peak PSS (all its processes at one moment): {total:.0f} MiB")
            print(f"  largest task {worst:.0f} MiB: {_verdict(worst <= _MEMORY_TARGET_MIB)} ({_load()})")
        if not args.skip_startup:
            modes = [(graph, preload) for preload in ([False, True] if args.preload else [False])
                     for graph in ([False, True] if args.between_graph else [False])]
            _report_startup(tmp, runs=args.runs, modes=modes)


def _report_startup(tmp: Path, *, runs: int, modes: list[tuple[bool, bool]]) -> None:
    """Start-up runs of each mode ((between_graph, preload)), each run beside a fresh reference.

    The one-process reference moves by a third between runs on a loaded machine, so every round measures it
    again and each mode's ratio is taken against its own round's reference; the medians are reported.
    """
    print(f"start-up: tfdist launch --workers 2 --ps 1 -> first training step ({_load()})")
    results: dict[tuple[bool, bool], list[dict[str, float]]] = {mode: [] for mode in modes}
    references = []
    for index in range(runs):
        references.append(server_start())
        for number, (graph, preload) in enumerate(modes):
            results[graph, preload].append(startup(tmp, index * len(modes) + number, between_graph=graph,
                                                   preload=preload))
    for mode in modes:
        name = ("between_graph" if mode[0] else "the coordinator") + (", --preload" if mode[1] else "")
        med = {key: statistics.median(r[key] for r in results[mode]) for key in results[mode][0]}
        print(f"  {name} (medians of {runs}; reference {statistics.median(references):.2f} s):")
        for key, label in (("interpreter", "chief's interpreter up"), ("imported", "chief imported TF + Keras"),
                           ("connected", "chief's strategy connected"), ("first_step", "first training step"),
                           ("trained", "chief's fit returned"), ("exit", "chief's exit handlers"),
                           ("job", "job over (1 epoch)")):
            print(f"    launch -> {label:28s} {med[key]:6.2f} s")
        ratio = statistics.median(r["first_step"] / ref for r, ref in zip(results[mode], references, strict=True))
        print(f"    first step at {ratio:.2f}x (import tensorflow + server start, each round's own); target <= "
              f"{_STARTUP_TARGET}x: {_verdict(ratio <= _STARTUP_TARGET)} ({_load()})")


if __name__ == "__main__":
    main()
