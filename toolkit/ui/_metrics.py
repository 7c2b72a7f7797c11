"""The chief's latest metrics: the newest value of every scalar in the job's TensorBoard event files.

Read with the same incremental reader the tuner uses (only what was appended
since the last look), one per output directory, so a page that polls a
running job reads each event once. TensorFlow is not imported.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from toolkit.jobs.storage.records import iso_time

__all__ = ["ChiefMetrics"]


class ChiefMetrics:
    """``latest(directory)``: each ``run/tag``'s last value, step and time."""

    def __init__(self) -> None:
        self._tails: dict[Path, Any] = {}
        self._lock = threading.Lock()

    def latest(self, directory: str | None) -> dict[str, Any]:
        if not directory or not Path(directory).is_dir():
            return {"scalars": [], "lastStep": None}
        from toolkit.jobs.tuning._objective import EventTail  # pulls in the tensorboard protos: only when asked

        root = Path(directory)
        with self._lock:
            tail = self._tails.setdefault(root, EventTail(root))
            tail.poll()
            series = {key: points[-1] for key, points in tail.series.items() if points}
        scalars = [{"run": run, "tag": tag, "step": p.step, "value": p.value, "time": iso_time(p.wall_time)}
                   for (run, tag), p in sorted(series.items())]
        last = max(series.values(), key=lambda p: (p.wall_time, p.step), default=None)
        return {"scalars": scalars, "lastStep": None if last is None else [last.step, last.wall_time]}
