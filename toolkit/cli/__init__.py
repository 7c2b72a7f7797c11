"""The `tfdist` command line: a thin layer over the public API.

Each verb lives in its own module with a ``register(subparsers)`` function. The
modules must not import TensorFlow at import time: `tfdist tf-config ...` has to
answer in milliseconds, so TensorFlow is imported inside the handlers that need it.

Exit codes (shared by every verb):
  0  success
  1  the thing checked or run failed (invalid TF_CONFIG, a failed job, ...)
  2  usage error (bad flags or arguments)
  130 interrupted (Ctrl-C)
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser"]

# Verb modules, in the order `tfdist --help` lists them.
_VERB_MODULES = (
    "toolkit.cli.tf_config_cmd",
    "toolkit.cli.launch_cmd",
    "toolkit.cli.run_cmd",
    "toolkit.cli.jobs_cmd",
    "toolkit.cli.local_cmd",
    "toolkit.cli.demo_cmd",
    "toolkit.cli.ui_cmd",
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfdist",
        description="Distributed TensorFlow 2 training you can start with one command.",
        epilog="Exit codes: 0 success, 1 failure (invalid config, failed job), 2 usage error, 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for name in _VERB_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real import error inside the module: surface it
                raise
            continue  # verb not built yet
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `tfdist ... | head`: the reader left; that is not an error of ours.
        # Point stdout at devnull so the interpreter's final flush stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
