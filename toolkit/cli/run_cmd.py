"""`tfdist run -- CMD` and `tfdist tf-config from-env`: TF_CONFIG from the launcher's environment.

Under `srun`, `mpirun`, a Kubernetes Indexed Job or a Kubeflow Trainer v2 runtime
every task runs the same command; `tfdist run` derives this task's TF_CONFIG
from the variables its launcher set (``tf_config.from_env``) and replaces itself
with CMD (no shell). Nothing here imports TensorFlow.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

_RUN_HELP = """\
Run CMD with this task's TF_CONFIG, derived from the environment srun, mpirun,
a Kubernetes Indexed Job or a Kubeflow Trainer v2 runtime started it in.

Roles by rank: chief (if the layout has one), workers, ps, evaluator.
Default layout: --strategy's (parameter_server: chief + 1 ps + workers;
multi_worker_mirrored: every task a worker).

  srun -n 4 tfdist run --strategy parameter_server -- python train.py
  mpirun -n 3 -x TFDIST_HOSTS=node1:2,node2 tfdist run -- python train.py

Exit codes: CMD's own; 1 the environment or layout is invalid (nothing run), 2 usage error.
"""
_FROM_ENV_HELP = """\
Print the TF_CONFIG `tfdist run` would give this task, and (with --explain) the
variables it read and the rules it applied.

Exit codes: 0 printed, 1 the environment or layout is invalid, 2 usage error.
"""


def _add_rules(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layout", metavar="ps=N,chief=0|1,evaluator=0|1",
                        help="roles by rank (default: the --strategy's layout)")
    parser.add_argument("--strategy", choices=("parameter_server", "multi_worker_mirrored"),
                        help="picks the default layout (default multi_worker_mirrored)")
    parser.add_argument("--port", type=int, default=None, metavar="BASE",
                        help="base port; a task's port is BASE + its slot on its host (default: $TFDIST_PORT, "
                             "else 2222, under Slurm 15000 + 32 * (job id %% 1000))")
    parser.add_argument("--kind", choices=("slurm", "trainer", "kubernetes", "mpi"),
                        help="read only this launcher's variables (default: the first that matches)")
    parser.add_argument("--dialect", choices=("tf", "cmle"), default="tf",
                        help="cmle names the chief `master` and adds environment: cloud (default tf)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run CMD with TF_CONFIG derived from srun/mpirun/Kubernetes env",
                                   description=_RUN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_rules(parser)
    parser.add_argument("--explain", action="store_true", help="print how TF_CONFIG was derived to stderr")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    parser.set_defaults(handler=_run)


def register_from_env(sub: argparse._SubParsersAction) -> None:
    """Adds `tf-config from-env` (called by the tf-config verb)."""
    parser = sub.add_parser("from-env", help="print this task's TF_CONFIG derived from srun/mpirun/Kubernetes env",
                            description=_FROM_ENV_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_rules(parser)
    parser.add_argument("--explain", action="store_true", help="also print the variables read and the rules")
    parser.set_defaults(handler=_from_env)


def _derive(args: argparse.Namespace, explain_to: TextIO) -> str | None:
    """This task's TF_CONFIG as JSON (with ``--explain``, how it was derived goes to ``explain_to``);
    None once the error is printed."""
    from tf_config import TFConfigError, from_env

    try:
        result = from_env(os.environ, layout=args.layout, strategy=args.strategy, port=args.port, kind=args.kind)
    except TFConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    cfg = result.tf_config
    if args.dialect == "cmle":
        from toolkit.launcher._dialect import DIALECTS
        cfg = DIALECTS["cmle"].apply(cfg)
    if args.explain:
        print(result.explain(), file=explain_to)
    return cfg.to_json()


def _from_env(args: argparse.Namespace) -> int:
    text = _derive(args, sys.stdout)
    if text is None:
        return EXIT_INVALID
    print(text)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("error: no command given; use `tfdist run [options] -- CMD ...`.", file=sys.stderr)
        return EXIT_USAGE
    text = _derive(args, sys.stderr)
    if text is None:
        return EXIT_INVALID
    os.environ["TF_CONFIG"] = text
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"error: cannot run {cmd[0]!r}: {exc.strerror}. Check the command and PATH.", file=sys.stderr)
        return 127
    return EXIT_OK  # not reached: execvp replaced this process
