"""A running trial's measurements: its metric's curve as it is written, and a tag that never comes.

Every measurement is a scalar of the study's ``hyperparameterMetricTag`` in the
TensorBoard events under the trial's output directory (``toolkit.fit``'s
summaries, ``toolkit.report_metric``), read while the trial runs by an
``EventTail`` (only what was appended since the last look). The study reports
each new one to Optuna (``trial.report(value, step)``), which keeps them and
whose pruner decides from them; the trial's job record keeps them too.

A tag that never appears is said early, by name: once the trial has written a
checkpoint and then more scalars (the end of its first epoch) without any that
the tag names, on two looks in a row, the study logs which tags do exist. Trainers that write no
checkpoint hear of it at their end, when the trial fails for want of an objective.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from toolkit.jobs.tuning._objective import EventTail, Point, files_under, missing_tag, resolve_tag

__all__ = ["TrialWatch", "measurement_docs", "first_checkpoint"]

# What a checkpoint of toolkit.fit, tf.train.CheckpointManager or Keras looks like on disk.
_CHECKPOINT_PATTERNS = ("checkpoint", "*.index", "*.weights.h5", "*.keras")


def first_checkpoint(directory: str | Path) -> float | None:
    """When the first checkpoint under ``directory`` was written (its mtime), or None."""
    times = []
    for path in files_under(Path(directory), _CHECKPOINT_PATTERNS):
        with contextlib.suppress(FileNotFoundError):  # a temporary file renamed away meanwhile
            times.append(path.stat().st_mtime)
    return min(times) if times else None


def measurement_docs(points: list[Point]) -> list[dict[str, Any]]:
    """CMLE's ``allMetrics`` entries, in step order; a NaN's value is None (JSON has no NaN)."""
    return [{"trainingStep": p.step, "objectiveValue": None if math.isnan(p.value) else p.value}
            for p in points]


class TrialWatch:
    """What one running trial has measured so far."""

    def __init__(self, output_dir: str | Path, tag: str) -> None:
        self.tail = EventTail(output_dir)
        self.tag = tag
        self.warned = False
        self._suspect = 0

    def poll(self) -> list[Point]:
        """Every measurement so far, one per step (a step written twice, by a restart, keeps its last)."""
        self.tail.poll()
        key = resolve_tag(list(self.tail.series), self.tag)
        if key is None:
            return []
        by_step = {p.step: p for p in self.tail.series[key]}
        return [by_step[step] for step in sorted(by_step)]

    def missing_tag(self) -> str | None:
        """Once: the tag has not appeared though a checkpoint and later scalars have; None otherwise."""
        if self.warned or resolve_tag(list(self.tail.series), self.tag) is not None:
            return None
        written = first_checkpoint(self.tail.root)
        later = written is not None and any(p.wall_time > written for points in self.tail.series.values()
                                            for p in points)
        self._suspect = self._suspect + 1 if later else 0
        if self._suspect < 2:  # seen on two looks in a row: the run's other writer may be mid-flush on the first
            return None
        self.warned = True
        return f"after its first checkpoint: {missing_tag(self.tail.root, list(self.tail.series), self.tag)}"
