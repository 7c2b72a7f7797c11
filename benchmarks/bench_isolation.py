"""What running a local cluster in a private network namespace costs.

Launches 1 chief + 2 workers + 1 ps whose tasks only print a line (no
TensorFlow), with and without ``isolate``, and prints the median wall time of
each and the difference: the holder process (``unshare`` plus a loopback
ioctl) and one ``nsenter`` per task. Not a test: timings on a shared machine
are noisy.

Usage:
    python benchmarks/bench_isolation.py [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from toolkit.launcher import launch
from toolkit.launcher.local._isolation import unavailable_reason


def _once(root: Path, *, isolate: bool) -> float:
    started = time.perf_counter()
    result = launch(["python", "-c", "print('up')"], chief=1, workers=2, ps=1, job_dir=root / f"job-{started}",
                    isolate=isolate, echo=False, grace_period=0.5)
    assert result.exit_code == 0, result.message
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"no isolation on this machine: {reason}")
    with tempfile.TemporaryDirectory() as tmp:
        timings = {isolate: [_once(Path(tmp), isolate=isolate) for _ in range(args.runs)] for isolate in (False, True)}
    plain, isolated = (statistics.median(timings[k]) for k in (False, True))
    print(f"4-task launch, median of {args.runs}: plain {plain:.3f} s, isolated {isolated:.3f} s, "
          f"isolation adds {isolated - plain:+.3f} s ({isolated / plain:.2f}x)")


if __name__ == "__main__":
    main()
