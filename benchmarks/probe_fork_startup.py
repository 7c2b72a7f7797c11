"""Probe: the start-up a launcher that forks its tasks from one TensorFlow import would reach.

The probe that led to ``tfdist launch --preload`` (``toolkit/launcher/local/_preload.py``), kept to
compare the bare mechanism with the launcher's: the four tasks of the demo importing TensorFlow at
the same time on this two-core machine had the chief imported only at about 1.3x the start-up
reference (``bench_resources.py``). This probe imports TensorFlow and Keras once, then ``fork``\ s
the demo's four tasks (1 ps, 2 workers, the chief), each with its own ``TF_CONFIG``, and stamps the
chief's first ``on_train_batch_end`` (the end of the first chunk of steps the chief waits for, as
``bench_resources.py`` does). ``bench_resources.py --preload`` measures the same through the launcher.
Each round also measures the reference: a fresh process that imports TensorFlow and starts a
server, until its port answers.

Usage:
    python benchmarks/probe_fork_startup.py [--rounds 2]
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

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_resources import server_start  # noqa: E402  (the same reference as bench_resources.py)

_TASKS = [("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)]


def _ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _task(job: str, index: int, cluster: dict[str, list[str]], work: str, between_graph: bool) -> int:
    """One forked task: the demo with this task's TF_CONFIG; the chief stamps its first chunk."""
    import keras

    from toolkit import demo

    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
    marks = os.path.join(work, "first_step.json")

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if not os.path.exists(marks):
                Path(marks).write_text(json.dumps(time.time()))

    argv = ["--model-dir", os.path.join(work, "model"), "--epochs", "1", "--steps-per-execution", "1"]
    try:
        return demo.main(argv + (["--between-graph"] if between_graph else []),
                         callbacks=[FirstStep()] if job == "chief" else [])
    except SystemExit as exc:  # servers leave with the chief's goodbye
        return exc.code if isinstance(exc.code, int) else 1


def _forked_job(started: float, between_graph: bool) -> dict[str, float]:
    """Runs in a fresh interpreter: import once, fork the four tasks, wait for them."""
    from strategies import TRAINER_UNUSED_MODULES, skip_imports

    skip_imports(TRAINER_UNUSED_MODULES)
    import keras  # noqa: F401  TensorFlow and Keras, once, for every task
    import tensorflow  # noqa: F401

    import toolkit.data  # noqa: F401
    import toolkit.demo  # noqa: F401
    import toolkit.training.fit  # noqa: F401

    imported = time.time()
    ports = _ports(4)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"],
               "chief": [f"127.0.0.1:{ports[3]}"]}
    work = tempfile.mkdtemp(prefix="tfdist-fork-probe-")
    pids = []
    for job, index in _TASKS:
        pid = os.fork()
        if pid == 0:  # the task: its atexit handlers (the chief's goodbye) run before the hard exit
            import atexit

            code = _task(job, index, cluster, work, between_graph)
            atexit._run_exitfuncs()
            os._exit(code or 0)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    first = json.loads(Path(work, "first_step.json").read_text())
    return {"imported": imported - started, "first_step": first - started, "exit_codes": codes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_forked_job(float(args.child[0]), args.child[1] == "between_graph")))
        return
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(_REPO)}
    ratios: dict[str, list[float]] = {"coordinator": [], "between_graph": []}
    for round_ in range(1, args.rounds + 1):
        reference = server_start()
        line = [f"round {round_}: reference {reference:.2f} s"]
        for mode in ratios:
            started = time.time()
            out = subprocess.run([sys.executable, __file__, "--child", repr(started), mode], capture_output=True,
                                 text=True, timeout=600, env=env, cwd=_REPO)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            ratios[mode].append(result["first_step"] / reference)
            line.append(f"{mode}: imported {result['imported']:.2f} s, first chunk {result['first_step']:.2f} s "
                        f"({ratios[mode][-1]:.2f}x), exit codes {result['exit_codes']}")
        print("; ".join(line), f"(load {os.getloadavg()[0]:.1f})", flush=True)
    for mode, values in ratios.items():
        print(f"{mode}: first chunk at {statistics.median(values):.2f}x the reference (median of {args.rounds}); "
              f"the target for tfdist launch is <= 1.3x")


if __name__ == "__main__":
    main()
