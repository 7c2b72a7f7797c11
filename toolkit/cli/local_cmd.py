"""`tfdist local train`: run a trainer in the foreground, like `gcloud ai-platform local train`.

    tfdist local train --module-name trainer.task [--package-path DIR] [--job-dir DIR]
        [--distributed [--worker-count N] [--parameter-server-count M] [--evaluator-count K]] -- ARGS

Without --distributed the module runs once, in this terminal, with a local
TF_CONFIG (no cluster). With --distributed it runs on a local cluster (one
process per task, loopback addresses, free ports), output prefixed `[worker-1]`.
Nothing is recorded in the job store. TensorFlow is not imported here.
"""
from __future__ import annotations

import argparse
import sys

from tf_config.errors import FieldError
from toolkit.cli._flags import LOCAL_TRAIN_FLAGS, error_text
from toolkit.cli.jobs_cmd import UserArgsParser
from toolkit.cli.launch_cmd import add_isolate_flag, isolate_children

EXIT_CODES = """\
Exit codes:
  0  the trainer (the master/chief task) exited 0
  N  the trainer's exit code (1 when a task failed)
  2  usage error (bad flags)
  124 the job ran longer than --timeout
  130 interrupted (Ctrl-C); every task is stopped
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    local = subparsers.add_parser("local", help="run a trainer here, in the foreground (gcloud local train)",
                                  description=__doc__, epilog=EXIT_CODES, formatter_class=fmt)
    verbs = local.add_subparsers(dest="local_verb", metavar="COMMAND", parser_class=UserArgsParser)
    verbs.required = True
    train = verbs.add_parser("train", help="run the trainer module", description=__doc__, epilog=EXIT_CODES,
                             formatter_class=fmt)
    train.add_argument("--module-name", required=True, help="trainer module, e.g. trainer.task")
    train.add_argument("--package-path", help="local directory of the trainer package (its parent goes on PYTHONPATH)")
    train.add_argument("--job-dir", help="passed to the trainer as --job-dir")
    train.add_argument("--distributed", action="store_true", help="run a local cluster instead of one process")
    train.add_argument("--worker-count", type=int, default=None, help="workers besides the master (default 2)")
    train.add_argument("--parameter-server-count", type=int, default=None, help="parameter servers (default 2)")
    train.add_argument("--evaluator-count", type=int, default=None, help="evaluators, 0 or 1 (default 0)")
    train.add_argument("--use-chief-in-tf-config", action="store_true",
                       help="name the primary task `chief` in TF_CONFIG instead of `master`")
    train.add_argument("--timeout", type=float, default=None, help="stop every task after this many seconds")
    add_isolate_flag(train)
    train.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from toolkit.jobs.engines.local.local_train import local_train
    from toolkit.jobs.errors import JobError

    isolate_children(args.isolate)
    counts = {"workerCount": args.worker_count, "parameterServerCount": args.parameter_server_count,
              "evaluatorCount": args.evaluator_count}
    if not args.distributed and any(v is not None for v in counts.values()):
        print("WARNING: --worker-count, --parameter-server-count and --evaluator-count are ignored "
              "without --distributed", file=sys.stderr)
    try:
        return local_train(args.module_name, args=args.user_args, package_path=args.package_path,
                           job_dir=args.job_dir, distributed=args.distributed,
                           workers=2 if args.worker_count is None else args.worker_count,
                           ps=2 if args.parameter_server_count is None else args.parameter_server_count,
                           evaluators=args.evaluator_count or 0, use_chief=args.use_chief_in_tf_config,
                           timeout=args.timeout, stream=sys.stdout)
    except JobError as exc:
        text = error_text(exc, LOCAL_TRAIN_FLAGS) if isinstance(exc, FieldError) else str(exc)
        print(f"ERROR: {text}", file=sys.stderr)
        return 2
