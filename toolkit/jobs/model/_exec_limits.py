"""What the kernel lets ``execve`` carry, checked at submit: a job that passes cannot fail with E2BIG later.

A local task starts with its arguments on the command line and its TF_CONFIG in
the environment, and CMLE's TF_CONFIG carries the whole ``trainingInput``, the
arguments included. Linux refuses any single argument or ``NAME=value`` longer
than ``MAX_ARG_STRLEN`` (32 pages: 128 KiB) and an argument list plus
environment over ``ARG_MAX`` (``sysconf``, a quarter of the stack limit),
with "Argument list too long". tfdist's own limits allow 10,000 arguments of
65,536 characters, so three 60,000-character arguments pass them, and
would only fail once the job ran.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.jobs.errors import Problem

__all__ = ["exec_problems"]

_ADDRESS = "127.0.0.1:65535"
_MARGIN = 64 * 1024  # for what the launcher adds (PYTHONPATH, TFDIST_*, the trial's flags)


def _limits() -> tuple[int, int]:
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        arg_max = 2 * 1024 * 1024
    return 32 * page, arg_max


def exec_problems(argv: Sequence[str], counts: Mapping[str, int], training_input: Mapping[str, Any], *,
                  environ: Mapping[str, str]) -> list[Problem]:
    """The problems (empty: none) of starting a task with ``argv`` and the TF_CONFIG a job of ``counts``
    with ``training_input`` gives each task, from an environment like ``environ``."""
    strlen, arg_max = _limits()
    tf_config = json.dumps({"cluster": {kind: [_ADDRESS] * count for kind, count in counts.items()},
                            "task": {"type": "worker", "index": max(counts.values(), default=1), "trial": "1000"},
                            "environment": "cloud", "job": dict(training_input)})
    size = len(f"TF_CONFIG={tf_config}".encode())
    problems = []
    if size >= strlen:
        problems.append(Problem("error", "trainingInput.args", f"makes each task's TF_CONFIG {size:,} bytes (it "
                                "carries trainingInput, the arguments included); Linux refuses an environment "
                                f"variable of {strlen:,} bytes or more. Pass large values in a file (a path "
                                "argument) instead."))
    longest = max((len(a.encode(errors="surrogateescape")) + 1 for a in argv), default=0)
    if longest > strlen:
        problems.append(Problem("error", "trainingInput.args", f"has an argument of {longest - 1:,} bytes; Linux "
                                f"refuses one of {strlen:,} bytes or more. Pass it in a file instead."))
    total = (sum(len(a.encode(errors="surrogateescape")) + 1 for a in argv) + size
             + sum(len(k) + len(v) + 2 for k, v in environ.items()))
    if total + _MARGIN > arg_max:
        problems.append(Problem("error", "trainingInput.args", f"with TF_CONFIG and this environment needs "
                                f"{total:,} bytes to start a task; Linux allows {arg_max:,} in all (ARG_MAX). "
                                "Pass large values in files, or start from a smaller environment."))
    return problems
