"""How long a trivial parameter-server job takes on a local cluster, and where the time goes.

Launches 1 chief + 2 workers + 1 ps with ``toolkit.launcher`` running a script
that only builds the strategy and says goodbye, and measures from the launch:
- every ps/worker listening (the TensorFlow import and server start, in parallel);
- the chief connected (its own port answers once ParameterServerStrategy is up);
- the job over, every process gone (the servers exit on the chief's goodbye).
Prints medians and ratios to one ``import tensorflow``. Not a test: timings on
a shared machine are noisy.

Usage:
    python benchmarks/bench_cluster_startup.py [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from toolkit.launcher import launch

_ENTRYPOINT = """\
from strategies import chief_session, make_strategy, run_role
cfg = run_role()                      # ps and workers serve here until the goodbye
strategy = make_strategy(tf_config=cfg)
with chief_session(strategy):
    pass
"""


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _watch(job_dir: Path, started: float, marks: dict[str, float], stop: threading.Event) -> None:
    """Records when the servers, then the chief, first answer on their ports."""
    cluster_file = job_dir / "cluster.json"
    while not cluster_file.exists() and not stop.is_set():
        time.sleep(0.01)
    if stop.is_set():
        return
    cluster = json.loads(cluster_file.read_text())["cluster"]
    servers = [a for job in ("ps", "worker") for a in cluster[job]]
    while not stop.is_set() and "chief" not in marks:
        if "servers" not in marks and all(_listening(a) for a in servers):
            marks["servers"] = time.perf_counter() - started
        if "servers" in marks and _listening(cluster["chief"][0]):
            marks["chief"] = time.perf_counter() - started
        time.sleep(0.05)


def _one_run(script: Path, tmp: Path, index: int) -> dict[str, float]:
    job_dir = tmp / f"job-{index}"
    marks: dict[str, float] = {}
    stop = threading.Event()
    started = time.perf_counter()
    watcher = threading.Thread(target=_watch, args=(job_dir, started, marks, stop), daemon=True)
    watcher.start()
    result = launch(["python", str(script)], workers=2, ps=1, job_dir=job_dir, timeout=300, echo=False,
                    env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    marks["done"] = time.perf_counter() - started
    stop.set()
    watcher.join(5)
    if not result.ok or any(t.exit_code != 0 for t in result.tasks):
        raise SystemExit(f"run {index} failed: {result.message}")
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorflow"], check=True, capture_output=True, timeout=300)
    tf_import = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "trivial.py"
        script.write_text(_ENTRYPOINT)
        runs = [_one_run(script, Path(tmp), i) for i in range(args.runs)]
    med = {key: statistics.median(r[key] for r in runs if key in r) for key in ("servers", "chief", "done")}
    print(f"one `import tensorflow` (alone)             {tf_import:6.2f} s")
    print(f"launch -> 3 servers listening (4 tasks)     {med['servers']:6.2f} s  "
          f"({med['servers'] / tf_import:.2f}x one import: started in parallel)")
    print(f"launch -> chief connected                   {med['chief']:6.2f} s")
    print(f"launch -> job over, every process gone      {med['done']:6.2f} s  "
          f"(shutdown after connect: {med['done'] - med['chief']:.2f} s)")
    print(f"medians of {args.runs} run(s); all tasks exited 0 by themselves in every run")


if __name__ == "__main__":
    main()
