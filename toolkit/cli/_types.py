"""Argument types shared by the `tfdist` verbs: numbers checked where they are parsed."""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import TypeVar

from tf_config.limits import MAX_TASKS

_N = TypeVar("_N", int, float)


def _number(text: str, kind: Callable[[str], _N], expected: str) -> _N:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, received {text!r}") from None


def non_negative_int(text: str) -> int:
    """A count that may be 0 (tasks of one kind, ports offsets, ...)."""
    value = _number(text, int, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, received {value}")
    return value


def positive_int(text: str) -> int:
    """A count that must be at least 1 (epochs, workers of a demo, ...)."""
    value = _number(text, int, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {value}")
    return value


def task_count(text: str) -> int:
    """Tasks of one kind: 0 up to the documented limit (every TF_CONFIG lists every task)."""
    value = non_negative_int(text)
    if value > MAX_TASKS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TASKS:,} tasks, received {value}")
    return value


_UNUSABLE_IN_PATHS = re.compile(r"[\x00\ud800-\udfff]")


def path_text(text: str) -> str:
    """A file or directory name: no NUL byte or lone surrogate, which no file system can store."""
    if _UNUSABLE_IN_PATHS.search(text):
        shown = text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise argparse.ArgumentTypeError(f"expected a path without NUL bytes or lone surrogates, received "
                                         f"{shown[:80]!r}")
    return text


def positive_seconds(text: str) -> float:
    """A duration in seconds, greater than 0 (and finite)."""
    value = _number(text, float, "a positive number of seconds")
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, received {text}")
    return value
