"""What the launcher's ``sitecustomize`` costs a task at start-up.

Every Python task of ``tfdist launch`` starts with ``toolkit/launcher/_hooks``
first on PYTHONPATH, so that ``server.join()`` and hand-built strategies end
with the job. This starts ``python -c pass`` (a task that never imports
TensorFlow) and ``python -c "import tensorflow"`` with and without it,
interleaved, and prints the medians. Not a test: timings on a shared machine
are noisy.

Usage:
    python benchmarks/bench_hand_built_hook.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HOOKS = Path(__file__).resolve().parents[1] / "toolkit" / "launcher" / "_hooks"


def _once(code: str, *, hooked: bool) -> float:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if hooked:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for code in ("pass", "import tensorflow"):
        plain, hooked = [], []
        for _ in range(args.runs):
            plain.append(_once(code, hooked=False))
            hooked.append(_once(code, hooked=True))
        print(f"python -c {code!r}: plain {statistics.median(plain):.2f} s, with the hook "
              f"{statistics.median(hooked):.2f} s (median of {args.runs}, interleaved)")


if __name__ == "__main__":
    main()
