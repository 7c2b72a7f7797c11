"""How rendering grows with the number of tasks: `tf-config generate` and a Kubernetes `--dry-run`.

Every task's TF_CONFIG lists the whole cluster, so validating each one on its
own made generate quadratic (2,000 workers: 74 s) and hung a 100,000-worker
dry-run. This times, for 10 / 100 / 1,000 tasks (a chief, a ps and workers):

  generate()        tf_config.generate, the configs as objects (the API);
  tf-config gen FMT  `tfdist tf-config generate --format FMT` (export is the
                      default), in this process, output thrown away: its text
                      is one cluster per task, so its size grows with the
                      square of the task count by nature;
  jobs --dry-run    `tfdist jobs submit training --backend kubernetes --dry-run`.

Prints the median of a few runs and microseconds per task, so a linear path
shows a flat per-task figure. Not a test: timings on a shared machine are noisy.

Usage:
    python benchmarks/bench_render_scaling.py [--runs 3] [--tasks 10,100,1000]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tf_config import generate
from toolkit.cli import main as tfdist

_SPEC = """\
trainingInput:
  scaleTier: CUSTOM
  masterType: standard
  workerType: standard
  workerCount: {workers}
  parameterServerType: standard
  parameterServerCount: 1
  useChiefInTfConfig: true
  pythonModule: trainer.task
"""


class _Sink(io.TextIOBase):
    """A stdout that counts what it is given and keeps none of it."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, text: str) -> int:
        self.chars += len(text)
        return len(text)


def _median(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _cli(argv: list[str]) -> Callable[[], int]:
    def run() -> int:
        sink = _Sink()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()):
            code = tfdist(argv)
        if code != 0:
            raise SystemExit(f"tfdist {' '.join(argv)} exited {code}")
        return sink.chars
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", default="10,100,1000")
    args = parser.parse_args()
    counts = [int(n) for n in args.tasks.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TFDIST_HOME"] = str(Path(tmp) / "home")  # the dry-run opens (and leaves empty) a store
        _cli(["jobs", "list"])()  # imports and the store's creation out of the first timing
        print(f"{'tasks':>6} {'what':<20} {'median s':>9} {'us/task':>8} {'output':>10}")
        for n in counts:
            workers = n - 2
            spec = Path(tmp) / f"job-{n}.yaml"
            spec.write_text(_SPEC.format(workers=workers))
            rows = {
                "generate()": lambda w=workers: generate(chief=1, workers=w, ps=1, base_port=2000),
                **{f"tf-config gen {fmt}": _cli(["tf-config", "generate", "--workers", str(workers), "--ps", "1",
                                                 "--base-port", "2000", "--format", fmt])
                   for fmt in ("export", "json", "yaml")},
                "jobs --dry-run": _cli(["jobs", "submit", "training", f"scale-{n}", "--config", str(spec),
                                        "--backend", "kubernetes", "--dry-run", "--image", "trainer:1"]),
            }
            for what, call in rows.items():
                seconds = _median(call, args.runs)
                out = call()
                size = f"{out / 1e6:.1f} MB" if isinstance(out, int) else ""
                print(f"{n:>6} {what:<20} {seconds:>9.3f} {seconds / n * 1e6:>8.0f} {size:>10}")


if __name__ == "__main__":
    main()
