"""The measurements a trainer reported with cloudml-hypertune (``import hypertune``).

Published CMLE / AI Platform trainers call
``hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag=...,
metric_value=..., global_step=...)``. The package rewrites the file named by
``CLOUD_ML_HP_METRIC_FILE`` on every call with its last 100 reports, one JSON
object a line::

    {"accuracy": "0.93", "checkpoint_path": "", "global_step": "300", "timestamp": 1764115200.5, "trial": "2"}

The metric is the key that is none of the others, its value a string holding a
float. A tuning job gives every trial task that variable, pointing into the
trial's own directory (``toolkit.hypertune.METRIC_FILE``), and reads the file
here as the run ``hypertune``: each line is one measurement at its
``global_step``, exactly like a TensorBoard scalar.

Because the package rewrites the whole file (and keeps only the last 100), each
look reads it whole and keeps what it saw before: nothing read is lost when a
later rewrite drops it. A last line without its newline may be mid-write and is
read again next time. Any other line that is not such an object is skipped with
one warning naming the file, the line and what is wrong.
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from toolkit._owned import UnsafePathError, read_regular
from toolkit.hypertune import METRIC_FILE

__all__ = ["RUN", "MetricFile"]

RUN = "hypertune"
_log = logging.getLogger(__name__)
_FIELDS = ("timestamp", "trial", "global_step", "checkpoint_path")
_MAX_BYTES = 1 << 20   # the package keeps at most 100 lines
MAX_STEP = 2 ** 63 - 1


class MetricFile:
    """A trial's cloudml-hypertune metric file, read whole on every ``poll``."""

    def __init__(self, trial_dir: str | Path) -> None:
        self.path = Path(trial_dir) / METRIC_FILE
        self.seen: dict[str, dict[str, tuple[float, int, float]]] = {}   # tag -> line -> point
        self._warned: set[tuple[int, str]] = set()

    def poll(self) -> bool:
        """Reads the file; True if it held a measurement not seen before."""
        try:  # a trial's file: at most 100 lines of the package's, so a bounded read; never a FIFO or symlink
            text = read_regular(self.path, limit=_MAX_BYTES).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return False
        except UnsafePathError as exc:
            if (0, "unsafe") not in self._warned:
                self._warned.add((0, "unsafe"))
                _log.warning("%s", exc)
            return False
        lines = text.split("\n")
        complete, last = lines[:-1], lines[-1]   # ``last`` is "" when the file ends with its newline
        grew = False
        for number, line in enumerate(complete, start=1):
            grew |= self._take(number, line, torn_ok=False)
        if last.strip():
            grew |= self._take(len(complete) + 1, last, torn_ok=True)
        return grew

    def series(self) -> dict[str, list[tuple[float, int, float]]]:
        """``tag -> [(timestamp, step, value), ...]`` in the order they were reported."""
        return {tag: sorted(points.values(), key=lambda p: p[:2]) for tag, points in self.seen.items()}

    def _take(self, number: int, line: str, *, torn_ok: bool) -> bool:
        if not line.strip():
            return False
        try:
            record = _parse(line)
        except ValueError as exc:
            if not torn_ok and (number, line) not in self._warned:
                self._warned.add((number, line))
                _log.warning("%s line %d skipped: %s (received: %.200s). Report with "
                             "hypertune.HyperTune().report_hyperparameter_tuning_metric(...), "
                             "which writes one JSON object a line.", self.path, number, exc, line)
            return False
        grew = False
        for tag, (timestamp, step, value) in record:
            points = self.seen.setdefault(tag, {})
            if line not in points:   # the same report, rewritten by the package's next call
                points[line] = (time.time() if timestamp is None else timestamp, step, value)
                grew = True
        return grew


def _parse(line: str) -> list[tuple[str, tuple[float | None, int, float]]]:
    """The ``(tag, (timestamp, step, value))`` pairs of one line; ValueError says what is wrong.

    A line with no ``timestamp`` (not the package's) is stamped when it is first read.
    """
    try:
        record: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    timestamp = None if record.get("timestamp") is None else _number(record, "timestamp")
    step = record.get("global_step", 0)
    try:  # bounded before int(): "Infinity" overflows, 5,000 digits pass Python's limit
        if isinstance(step, bool) or (isinstance(step, str) and len(step.strip()) > 19):
            raise ValueError
        step = int(step)
        if not 0 <= step <= MAX_STEP:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"`global_step` is {str(step)[:40]!r}; expected an integer from 0 to {MAX_STEP}") from None
    metrics = {k: v for k, v in record.items() if k not in _FIELDS}
    if not metrics:
        raise ValueError("no metric in it (only " + ", ".join(sorted(record)) + ")")
    return [(tag, (timestamp, step, _number(metrics, tag))) for tag in metrics]


def _number(record: dict[str, Any], key: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"`{key}` is {value!r}; expected a number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"`{key}` is {value!r}; expected a number") from None
    if math.isinf(number):
        raise ValueError(f"`{key}` is {value!r}; expected a finite number")
    return number
