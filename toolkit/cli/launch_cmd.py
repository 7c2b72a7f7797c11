"""`tfdist launch ... -- CMD ARGS`: a local TensorFlow cluster in one command.

The entrypoint after ``--`` runs unchanged in every task, like torchrun or
``gcloud ai-platform local train --distributed``. This module is a thin layer
over ``toolkit.launcher.launch``; it does not import TensorFlow at all (the tasks
do).
"""
from __future__ import annotations

import argparse
import sys

from toolkit.cli._types import non_negative_int, positive_seconds

_HELP = """\
Start a local cluster (chief, workers, ps, evaluator) on 127.0.0.1 with free
ports, run CMD in every task with its own TF_CONFIG, and wait for the chief.

Every output line is prefixed with its task ([chief-0], [worker-1], [ps-0]);
each task's full log is kept in JOB_DIR/logs/<task>.log. With --ps and no
--chief, a chief is added as the parameter-server coordinator. Each task also
gets TFDIST_JOB_DIR, TFDIST_TASK_DIR, TFDIST_TASK_NAME and TFDIST_RESTART_COUNT.

Failure policy: a parameter-server worker that dies is restarted alone (up to
--max-restarts). Any other death (a ps, any task of a job without ps, or a
failed chief) restarts the whole cluster when --restartable says CMD resumes
from its checkpoint (up to --max-restarts), else the job fails, naming the task,
its exit code and the tail of its log.

Example:
  tfdist launch --workers 2 --ps 1 -- python train.py --epochs 2

Exit codes:
  N    the chief's exit code (0 success; 128+S if signal S killed it)
  1    another task failed and could not be restarted
  2    usage error (bad flags, no CMD, CMD not found)
  124  the job ran past --timeout
  130  interrupted (Ctrl-C; 143 for SIGTERM); every task is stopped
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `launch` verb."""
    parser = subparsers.add_parser("launch", help="run a command as every task of a local cluster",
                                   description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chief", type=non_negative_int, default=None, metavar="N",
                        help="0 or 1 (default: 1 when --ps > 0, else 0: worker 0 is the chief)")
    parser.add_argument("--workers", type=non_negative_int, default=1, metavar="N", help="worker tasks (default 1)")
    parser.add_argument("--ps", type=non_negative_int, default=0, metavar="N", help="parameter-server tasks (default 0)")
    parser.add_argument("--evaluator", action="store_true", help="add an evaluator task")
    parser.add_argument("--job-dir", default=None, metavar="DIR",
                        help="job directory for logs/ and tasks/ (default runs/launch-<time>-<id>)")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="S", help="stop the job after S seconds")
    parser.add_argument("--max-restarts", type=non_negative_int, default=0, metavar="N",
                        help="restarts allowed per ps worker, and for the whole cluster (default 0)")
    parser.add_argument("--restartable", action="store_true",
                        help="CMD resumes from its last checkpoint, so the whole cluster may be restarted")
    parser.add_argument("--grace-period", type=positive_seconds, default=10.0, metavar="S",
                        help="seconds the other tasks get to exit after the chief ends (default 10)")
    parser.add_argument("--quiet", action="store_true", help="keep task output in the log files only")
    parser.add_argument("--chief-start-timeout", type=positive_seconds, default=None, metavar="S",
                        help="ps/worker servers exit if the chief never came up within S seconds (default 900)")
    parser.add_argument("--chief-lost-after", type=positive_seconds, default=None, metavar="S",
                        help="ps/worker servers exit once the chief was up and then unreachable S seconds (default 6)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the entrypoint, run in every task")
    parser.set_defaults(handler=_launch)


def _serve_env(args: argparse.Namespace) -> dict[str, str]:
    """The serve timeouts, for every task (``strategies.ServeOptions`` reads them)."""
    from strategies._serve_options import ENV_CHIEF_LOST_AFTER, ENV_CHIEF_START_TIMEOUT

    values = {ENV_CHIEF_START_TIMEOUT: args.chief_start_timeout, ENV_CHIEF_LOST_AFTER: args.chief_lost_after}
    return {name: f"{value:g}" for name, value in values.items() if value is not None}


def _launch(args: argparse.Namespace) -> int:
    from toolkit.launcher import LaunchError, launch
    from tf_config import TFConfigError

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("error: no command to run; put it after `--`, e.g. tfdist launch --workers 2 -- python train.py",
              file=sys.stderr)
        return 2
    try:
        result = launch(cmd, chief=args.chief, workers=args.workers, ps=args.ps, evaluator=int(args.evaluator),
                        job_dir=args.job_dir, timeout=args.timeout, max_restarts=args.max_restarts,
                        restartable=args.restartable, grace_period=args.grace_period, echo=not args.quiet,
                        env=_serve_env(args))
    except (LaunchError, TFConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tasks = ", ".join(f"{t.name}={t.exit_code}" + (f" (restarted {t.restarts}x)" if t.restarts else "")
                      for t in result.tasks)
    print(f"tfdist launch: {result.reason} in {result.duration:.1f} s, exit code {result.exit_code}. "
          f"{result.message}", file=sys.stderr)
    print(f"tasks: {tasks}; logs in {result.job_dir / 'logs'}", file=sys.stderr)
    return result.exit_code
