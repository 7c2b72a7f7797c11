"""`tfdist demo`: train a real model on a local parameter-server cluster in about a minute.

It launches 1 chief, 2 workers and 1 ps on 127.0.0.1 (``toolkit.launcher``), each
running ``python -m toolkit.demo``, forked from one process that imported TensorFlow
and Keras (``--no-preload``: a fresh interpreter per task), which trains a Keras 3 model on
scikit-learn's 8x8 digits (shipped offline) with ``toolkit.fit``, its workers running
the steps between-graph (``--no-between-graph``: through the chief's coordinator). No
network is needed. TensorFlow is imported only by the tasks, never by this module.
"""
from __future__ import annotations

import argparse
import json
import secrets
import shlex
import sys
import time
from pathlib import Path

from toolkit.cli._types import positive_int
from toolkit.cli.launch_cmd import add_console_flags

_HELP = """\
Train digits_mlp (or digits_cnn) on scikit-learn's digits with toolkit.fit on a
local cluster: 1 chief (with the progress bar, checkpoints, TensorBoard logs and
validation), 2 workers that run the training steps, and 1 parameter server.
Every task is forked from one process that imported TensorFlow and Keras
(--no-preload: a fresh interpreter each). Prints the final test accuracy, the
model directory and the command that opens TensorBoard on it.

Example:
  tfdist demo
  tfdist demo --model cnn --epochs 8 --dir runs/my-demo

Exit codes:
  0    trained (accuracy is printed)
  1    the job failed (the failing task and its log tail are printed)
  2    usage error
  124  the job ran past --timeout
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `demo` verb."""
    parser = subparsers.add_parser("demo", help="train digits on a local parameter-server cluster",
                                   description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help="where the run goes (default runs/demo-<date>-<time>-<random>); the model is in DIR/model")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp", help="which reference model (default mlp)")
    parser.add_argument("--epochs", type=positive_int, default=12, help="epochs of 22 steps (default 12)")
    parser.add_argument("--workers", type=positive_int, default=2, help="worker tasks (default 2)")
    parser.add_argument("--ps", type=positive_int, default=1, help="parameter servers (default 1)")
    parser.add_argument("--timeout", type=positive_int, default=600, metavar="S",
                        help="stop after S seconds (default 600)")
    parser.add_argument("--between-graph", action=argparse.BooleanOptionalAction, default=True,
                        help="each worker runs its own graph-mode step loop, as TF1's between-graph replication "
                        "does (FitOptions(between_graph=True), the default); --no-between-graph sends every step "
                        "through the chief's ClusterCoordinator (fit's own default)")
    parser.add_argument("--no-preload", action="store_true",
                        help="start every task as a fresh interpreter, instead of forking them all from one "
                        "process that imported TensorFlow and Keras (`tfdist launch --preload`)")
    add_console_flags(parser)
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from toolkit.launcher import LaunchError, launch
    from toolkit.launcher.local._preload import DEFAULT_PRELOAD

    # a random tail: a name another user cannot guess and create first (the launcher refuses theirs anyway)
    run_dir = Path(args.dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
    model_dir = run_dir / "model"
    cmd = ["python", "-m", "toolkit.demo", "--model-dir", str(model_dir.resolve()), "--model", args.model,
           "--epochs", str(args.epochs), *(["--between-graph"] if args.between_graph else [])]
    print(f"launching 1 chief, {args.workers} workers, {args.ps} ps: {' '.join(cmd)}", flush=True)
    try:
        result = launch(cmd, chief=1, workers=args.workers, ps=args.ps, job_dir=run_dir, timeout=args.timeout,
                        verbose=args.show_tf_noise or args.verbose > 0, isolate=args.isolate,
                        preload=() if args.no_preload else DEFAULT_PRELOAD)
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not result.ok:
        print(f"demo failed: {result.message}", file=sys.stderr)
        return result.exit_code or 1
    summary = json.loads((model_dir / "demo_result.json").read_text(encoding="utf-8"))
    print(f"final test accuracy: {summary['test_accuracy']:.4f} (global step {summary['global_step']}, "
          f"{result.duration:.0f} s)")
    print(f"model_dir: {model_dir}")
    print(f"exports: {', '.join(summary['exports'].values())}")
    print(f"tensorboard --logdir {shlex.quote(str(model_dir))}")
    return 0
