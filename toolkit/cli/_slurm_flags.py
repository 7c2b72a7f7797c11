"""The Slurm flags of `tfdist launch --backend slurm`, and the call they make."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from toolkit.cli._types import non_negative_int

__all__ = ["add_slurm_flags", "launch_on_slurm"]

_SPEC_FIELDS = ("chief", "workers", "ps", "evaluator", "timeout", "max_restarts", "restartable", "grace_period",
                "dialect", "cwd", "max_preemptions", "preload")


def add_slurm_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partition", default=None, help="slurm: sbatch --partition (default: the cluster's)")
    parser.add_argument("--time-limit", default=None, metavar="TIME",
                        help="slurm: sbatch --time, e.g. 30 or 1:00:00 (default: --timeout rounded up)")
    parser.add_argument("--nodes", type=non_negative_int, default=None, metavar="N",
                        help="slurm: sbatch --nodes (default: as many as Slurm picks)")


def launch_on_slurm(cmd: list[str], args: argparse.Namespace, kwargs: dict[str, Any]) -> Any:
    """One sbatch for the whole job (``toolkit.launcher.slurm.launch_slurm``); returns its LaunchResult."""
    from toolkit.launcher import LaunchSpec, default_job_dir
    from toolkit.launcher.slurm import SlurmOptions, launch_slurm

    spec = LaunchSpec(cmd=tuple(cmd), **{k: kwargs[k] for k in _SPEC_FIELDS})
    options = SlurmOptions(partition=args.partition, time_limit=args.time_limit, nodes=args.nodes or None,
                           shared_dirs=args.shared_dir)
    return launch_slurm(spec, job_dir=args.job_dir or default_job_dir(), env=kwargs["env"],
                        stream=None if args.quiet else sys.stdout, options=options)
