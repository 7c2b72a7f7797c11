"""How long `tfdist tf-config validate` takes, next to a bare interpreter and `import tensorflow`.

The validate path must never import TensorFlow; this shows what that buys.
Prints medians over several runs and the ratios between them. Not a test:
timings on a shared machine are noisy.

Usage:
    python benchmarks/bench_tf_config_cli.py [--runs 15] [--skip-tensorflow]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tf_config import generate, validate


def _wall(argv: list[str], runs: int) -> float:
    """Median wall time in seconds of running ``argv`` to completion."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _in_process_rate(doc: str, seconds: float = 1.0) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        validate(doc, strategy="auto")
        count += 1
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--skip-tensorflow", action="store_true", help="do not time `import tensorflow`")
    args = parser.parse_args()

    doc = generate(chief=1, workers=8, ps=2, evaluator=1, base_port=3000)[1].to_json()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tf_config.json"
        path.write_text(json.dumps(json.loads(doc), indent=2))
        bare = _wall([sys.executable, "-c", "pass"], args.runs)
        importing = _wall([sys.executable, "-c", "import tf_config"], args.runs)
        cli = _wall([sys.executable, "-m", "toolkit", "tf-config", "validate", str(path)], args.runs)
    print(f"python -c pass                       {bare * 1000:8.1f} ms (median of {args.runs})")
    print(f"python -c 'import tf_config'         {importing * 1000:8.1f} ms  (+{(importing - bare) * 1000:.1f} ms)")
    print(f"tfdist tf-config validate FILE       {cli * 1000:8.1f} ms  ({cli / bare:.2f}x a bare interpreter)")
    print(f"in-process validate(strategy=auto)   {_in_process_rate(doc):8.0f} documents/s (12-task cluster)")
    if not args.skip_tensorflow:
        tf = _wall([sys.executable, "-c", "import tensorflow"], max(1, args.runs // 5))
        print(f"python -c 'import tensorflow'        {tf * 1000:8.1f} ms  (validate is {tf / cli:.0f}x faster)")


if __name__ == "__main__":
    main()
