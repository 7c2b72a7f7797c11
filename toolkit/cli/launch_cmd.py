"""`tfdist launch ... -- CMD ARGS`: a local TensorFlow cluster in one command.

The entrypoint after ``--`` runs unchanged in every task, like torchrun or
``gcloud ai-platform local train --distributed``. This module is a thin layer
over ``toolkit.launcher.launch``; it does not import TensorFlow at all (the tasks
do).
"""
from __future__ import annotations

import argparse
import sys

from toolkit.cli._flags import LAUNCH_FLAGS, error_text
from toolkit.cli._slurm_flags import add_slurm_flags, launch_on_slurm
from toolkit.cli._types import non_negative_int, path_text, positive_seconds, task_count
from toolkit.launcher._spec import LaunchSpec
from toolkit.launcher.local._preload import DEFAULT_PRELOAD


def add_isolate_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--isolate/--no-isolate``: every verb that starts a local cluster has it."""
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                        help="run the local cluster in a private network namespace (default: wherever the "
                             "kernel allows it; TFDIST_ISOLATE=0 turns the default off)")


def isolate_children(isolate: bool | None) -> None:
    """Passes --isolate/--no-isolate on to clusters started by a process this one spawns (a job's supervisor)."""
    import os

    from toolkit.launcher import ENV_ISOLATE

    if isolate is not None:
        os.environ[ENV_ISOLATE] = "1" if isolate else "0"


def add_console_flags(parser: argparse.ArgumentParser) -> None:
    """``--verbose`` and ``--isolate/--no-isolate``, shared by the verbs that start a local cluster."""
    parser.add_argument("--verbose", dest="show_tf_noise", action="store_true",
                        help="also show TensorFlow's C++ start-up noise on the console (always in the logs)")
    add_isolate_flag(parser)


_HELP = """\
Start a local cluster (chief, workers, ps, evaluator) on 127.0.0.1 with free
ports, run CMD in every task with its own TF_CONFIG, and wait for the chief.

The cluster runs in a private network namespace (--isolate, the default where
the kernel allows unprivileged user namespaces): TensorFlow's servers listen
on every interface without authentication, and inside the namespace no other
host or namespace can reach them. --no-isolate (or TFDIST_ISOLATE=0) turns it
off. TensorFlow's C++ start-up noise (oneDNN, CUDA probes, absl notices) is
kept off the console but not out of the logs; --verbose, or your own
TF_CPP_MIN_LOG_LEVEL, shows it.

Every output line is prefixed with its task ([chief-0], [worker-1], [ps-0]);
each task's full log is kept in JOB_DIR/logs/<task>.log. With --ps and no
--chief, a chief is added as the parameter-server coordinator (TF2). --chief 0
--ps N is TF1's between-graph layout (and Kubeflow's TFJob): ps and workers,
worker 0 the chief, for TF1 graph scripts. Each task also gets TFDIST_JOB_DIR,
TFDIST_TASK_DIR, TFDIST_TASK_NAME and TFDIST_RESTART_COUNT.

Failure policy: a parameter-server worker that dies is restarted alone (up to
--max-restarts). Any other death (a ps, any task of a job without ps, or a
failed chief) restarts the whole cluster when --restartable says CMD resumes
from its checkpoint (up to --max-restarts), else the job fails, naming the task,
its exit code and the tail of its log.
A preempted task (exit code 143, or killed by SIGTERM) is restarted the same
way on its own budget, --max-preemptions, and never spends --max-restarts
(docs/preemption.md).

With --backend ray every task is a Ray actor on the cluster at --ray-address
(default $RAY_ADDRESS, else a Ray on this machine), placed by --placement;
TF_CONFIG uses each node's address, and the output comes back here with the
same prefixes (docs/ray.md). With --backend slurm the job is one sbatch whose
srun tasks take their roles from Slurm's variables (docs/slurm.md).

Example:
  tfdist launch --workers 2 --ps 1 -- python train.py --epochs 2
  tfdist launch --chief 0 --workers 2 --ps 1 --dialect tfjob -- python dist_mnist.py
  tfdist launch --backend ray --ray-address ray://head:10001 --workers 2 --ps 1 -- python train.py
  tfdist launch --backend slurm --partition gpu --workers 2 --ps 1 --job-dir /shared/run1 -- python train.py

Exit codes:
  N    the chief's exit code (0 success; 128+S if signal S killed it)
  1    another task failed and could not be restarted (or, with --success-policy
       all-workers, a worker did not exit 0)
  2    usage error (bad flags, no CMD, CMD not found)
  124  the job ran past --timeout
  143  a task was preempted and the job could not restart (also: SIGTERM to tfdist launch)
  130  interrupted (Ctrl-C; 143 for SIGTERM); every task is stopped
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `launch` verb."""
    parser = subparsers.add_parser("launch", help="run a command as every task of a local cluster",
                                   description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chief", type=non_negative_int, default=None, metavar="N",
                        help="0 or 1 (default: 1 when --ps > 0, else 0: worker 0 is the chief)")
    parser.add_argument("--workers", type=task_count, default=1, metavar="N", help="worker tasks (default 1)")
    parser.add_argument("--ps", type=task_count, default=0, metavar="N",
                        help="parameter-server tasks (default 0)")
    parser.add_argument("--evaluator", action="store_true", help="add an evaluator task")
    parser.add_argument("--job-dir", type=path_text, default=None, metavar="DIR",
                        help="job directory for logs/ and tasks/ (default runs/launch-<time>-<id>)")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                        help="stop the job after S seconds")
    parser.add_argument("--max-restarts", type=non_negative_int, default=0, metavar="N",
                        help="restarts allowed per ps worker, and for the whole cluster (default 0)")
    parser.add_argument("--max-preemptions", type=non_negative_int, default=LaunchSpec.max_preemptions, metavar="N",
                        help="restarts allowed after preemptions (a task exiting 143 or killed by SIGTERM), apart "
                        "from --max-restarts (default %(default)d)")
    parser.add_argument("--restartable", action="store_true",
                        help="CMD resumes from its last checkpoint, so the whole cluster may be restarted")
    parser.add_argument("--grace-period", type=positive_seconds, default=LaunchSpec.grace_period, metavar="S",
                        help="seconds the other tasks get to exit after the chief ends (default %(default)g)")
    parser.add_argument("--success-policy", choices=("chief", "all-workers"), default="chief",
                        help="chief: the chief's exit 0 is the job's success (default, TFJob's); all-workers: the "
                        "chief and every worker must exit 0 (TFJob's AllWorkers). Either way the closing line names "
                        "the tasks that did not end cleanly")
    parser.add_argument("--max-log-bytes", type=non_negative_int, default=None, metavar="N",
                        help="keep at most N bytes of each task run's output in its log file (default: all)")
    parser.add_argument("--log-backups", type=non_negative_int, default=0, metavar="K",
                        help="with --max-log-bytes: rotate a full log to <task>.log.1 (.1 to .2, ...) and start a new "
                        "one, keeping K older files, so the newest output is kept (default 0: stop at the cap)")
    parser.add_argument("--dialect", choices=("tf", "cmle", "tfjob"), default="tf",
                        help="tf: the chief is chief-0 (default); cmle: it is master-0 (TF_CONFIG, logs, messages) "
                        'and TF_CONFIG has "environment": "cloud"; tfjob: Kubeflow TFJob\'s TF_CONFIG '
                        '("environment": "cloud", 127.0.0.1 in place of each service name)')
    parser.add_argument("--cwd", type=path_text, default=None, metavar="DIR",
                        help="run every task in DIR (default: here)")
    parser.add_argument("--quiet", action="store_true", help="keep task output in the log files only")
    parser.add_argument("--preload", nargs="?", const=",".join(DEFAULT_PRELOAD), default="", metavar="MODULES",
                        help="import MODULES (comma-separated; default tensorflow,keras) once and fork every task "
                        "from that import, instead of starting a fresh interpreter per task: a faster start-up. "
                        "CMD must be `python SCRIPT ...` or `python -m MODULE ...` (docs/launcher.md)")
    add_console_flags(parser)
    parser.add_argument("--backend", choices=("local", "ray", "slurm"), default="local",
                        help="local processes (default), Ray actors, or one Slurm job (sbatch + srun)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="ray: the Ray cluster (default: $RAY_ADDRESS, else this machine)")
    parser.add_argument("--placement", default="auto", metavar="STRATEGY",
                        help="ray: auto (default), STRICT_SPREAD, SPREAD, PACK or STRICT_PACK")
    parser.add_argument("--shared-dir", action="store_true",
                        help="ray, slurm: --job-dir is mounted at the same path on every node")
    add_slurm_flags(parser)
    parser.add_argument("--chief-start-timeout", type=positive_seconds, default=None, metavar="S",
                        help="ps/worker servers exit if the chief never came up within S seconds (default 900)")
    parser.add_argument("--chief-lost-after", type=positive_seconds, default=None, metavar="S",
                        help="ps/worker servers exit once the chief was up and then unreachable S seconds (default 6)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the entrypoint, run in every task")
    parser.set_defaults(handler=_launch)


NO_ISOLATE_WARNING = ("warning: --no-isolate: every task's TensorFlow server listens on all interfaces without "
                      "authentication, so its ports are reachable from the network.")


def _serve_env(args: argparse.Namespace) -> dict[str, str]:
    """The serve timeouts, for every task (``strategies.ServeOptions`` reads them)."""
    from strategies._serve_options import ENV_CHIEF_LOST_AFTER, ENV_CHIEF_START_TIMEOUT

    values = {ENV_CHIEF_START_TIMEOUT: args.chief_start_timeout, ENV_CHIEF_LOST_AFTER: args.chief_lost_after}
    return {name: f"{value:g}" for name, value in values.items() if value is not None}


def _launch(args: argparse.Namespace) -> int:
    from tf_config import TFConfigError
    from toolkit.launcher import LaunchError, launch

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("error: no command to run; put it after `--`, e.g. tfdist launch --workers 2 -- python train.py",
              file=sys.stderr)
        return 2
    kwargs = dict(chief=args.chief, workers=args.workers, ps=args.ps, evaluator=int(args.evaluator),
                  job_dir=args.job_dir, timeout=args.timeout, max_restarts=args.max_restarts,
                  max_preemptions=args.max_preemptions, success_policy=args.success_policy,
                  max_log_bytes=args.max_log_bytes, log_backups=args.log_backups,
                  restartable=args.restartable, grace_period=args.grace_period, echo=not args.quiet,
                  dialect=args.dialect, cwd=args.cwd, preload=args.preload,
                  verbose=args.show_tf_noise or args.verbose > 0, env=_serve_env(args))
    if args.backend != "local" and (args.max_log_bytes is not None or args.log_backups):
        print(f"error: --max-log-bytes and --log-backups apply to the local backend; {args.backend} writes its "
              "tasks' logs itself",
              file=sys.stderr)
        return 2
    if args.backend == "slurm" and args.success_policy != "chief":
        print("error: --success-policy all-workers applies to the local and Ray backends; a Slurm job's end is "
              "its chief's (docs/slurm.md)", file=sys.stderr)
        return 2
    if args.backend != "local" and args.isolate:
        print("error: --isolate applies to the local backend only; a Ray cluster's tasks run on its nodes' "
              "networks (docs/ray.md)", file=sys.stderr)
        return 2
    try:
        if args.backend == "slurm":
            result = launch_on_slurm(cmd, args, kwargs)
        elif args.backend == "ray":
            from toolkit.launcher.ray import launch_ray
            result = launch_ray(cmd, address=args.ray_address, placement=args.placement,
                                shared_dirs=args.shared_dir, **kwargs)
        else:
            if args.isolate is False:
                print(NO_ISOLATE_WARNING, file=sys.stderr)
            result = launch(cmd, isolate=args.isolate, **kwargs)
    except (LaunchError, TFConfigError) as exc:
        print(f"error: {error_text(exc, LAUNCH_FLAGS)}", file=sys.stderr)
        return 2
    tasks = ", ".join(f"{t.name}={t.exit_code}" + (f" (restarted {t.restarts}x)" if t.restarts else "")
                      for t in result.tasks)
    print(f"tfdist launch: {result.reason} in {result.duration:.1f} s, exit code {result.exit_code}. "
          f"{result.message}", file=sys.stderr)
    print(f"tasks: {tasks}; logs in {result.job_dir / 'logs'}", file=sys.stderr)
    return result.exit_code
