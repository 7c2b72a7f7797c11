"""Runs every ``benchmarks/bench_*.py`` in turn (what ``make bench`` calls).

Each benchmark is a separate interpreter, so one that fails or leaves
TensorFlow state behind does not affect the next. Prints each one's output and
a closing summary; exits 1 if any benchmark failed. Benchmarks are not tests:
they print numbers and ratios and never assert on speed.

Usage:
    python benchmarks/run_all.py [--only NAME ...] [--timeout SECONDS]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="benchmark names, e.g. bench_training")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per benchmark")
    args = parser.parse_args()
    scripts = sorted(_HERE.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem in args.only]
    outcomes = []
    for script in scripts:
        print(f"=== {script.stem}", flush=True)
        started = time.perf_counter()
        try:
            code = subprocess.run([sys.executable, str(script)], cwd=_HERE.parent, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        outcomes.append((script.stem, code, time.perf_counter() - started))
        print(flush=True)
    print("=== summary")
    for name, code, seconds in outcomes:
        print(f"{name:32s} {'ok' if code == 0 else f'FAILED ({code})':14s} {seconds:7.0f} s")
    return 0 if all(code == 0 for _, code, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
