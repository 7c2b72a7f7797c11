"""A trial's objective: one scalar read back from the TensorBoard events in its output dir.

The supervisor never imports TensorFlow (slow to import, and large), so event
files are read here with the ``tensorboard`` package's protos and a small
TFRecord reader.

**Which events.** Every ``events.out.tfevents.*`` file under the trial's
output directory. The sub-directory is the run: ``toolkit.fit`` writes
``train/`` and ``validation/``, ``toolkit.report_metric`` writes at the top.
What a trainer reported with cloudml-hypertune (``import hypertune``) is the
run ``hypertune`` (``_metric_file``).

**Which tag.** ``hyperparameterMetricTag`` is matched in this order:

1. a tag of exactly that name; when several runs have it, ``hypertune`` wins
   (the trainer named it as its tuning metric, as on CMLE), then the top-level
   run, then ``validation``, then ``eval``, then the others alphabetically;
2. ``<run>/<tag>``, e.g. ``train/accuracy`` or ``validation/loss``;
3. ``val_<tag>`` (Keras' name for a validation metric) means ``validation/<tag>``;
4. a tag TensorFlow renamed (``epoch_acc`` -> ``epoch_accuracy``, ``acc`` ->
   ``accuracy``, ``val_acc`` -> ``validation/epoch_accuracy``) that names nothing
   is followed to its new name, with a warning said once.

**Which value.** ``FINAL`` (the default, as on CMLE): the value at the largest
step (the latest written, on a tie). ``BEST``: the largest value for MAXIMIZE,
the smallest for MINIMIZE.
"""
from __future__ import annotations

import fnmatch
import logging
import math
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.util import tensor_util

from toolkit._owned import UnsafePathError, open_regular
from toolkit.hypertune import METRIC_FILE
from toolkit.jobs.errors import JobError
from toolkit.jobs.tuning._metric_file import RUN as HYPERTUNE_RUN
from toolkit.jobs.tuning._metric_file import MetricFile

__all__ = ["EventTail", "TuningError", "Point", "missing_tag", "read_scalars", "resolve_tag", "read_objective",
           "select"]

_PREFERRED_RUNS = (HYPERTUNE_RUN, "", "validation", "eval")
logger = logging.getLogger(__name__)
_warned: set[Path] = set()
MAX_EVENT_BYTES = 64 << 20  # one event record (a summary, a graph) read into memory


class TuningError(JobError):
    """A trial cannot give an objective (no such metric, no events), or a study cannot run."""


@dataclass(frozen=True)
class Point:
    """One scalar summary: where it was written, at which step, and when."""

    step: int
    wall_time: float
    value: float


def files_under(root: Path, patterns: Sequence[str]) -> list[Path]:
    """The files under ``root`` whose names match one of ``patterns``, sorted.

    A running trial writes where this looks: TensorFlow saves each checkpoint into a
    ``ckpt-N_temp`` directory and renames it away, so a directory may vanish while it
    is walked, which ``os.walk`` passes over.
    """
    found = [Path(directory) / name for directory, _, names in os.walk(root)
             for name in names if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)]
    return sorted(found)


def _records(path: Path, offset: int = 0) -> Iterator[tuple[bytes, int]]:
    """TFRecord payloads from ``offset``, each with the offset just past it; stops quietly at a torn
    last record (its writer may still be running), so a later call from the last offset reads it whole."""
    try:  # a regular file of this user only: a FIFO would block the study, a symlink read someone else's file
        fh = open_regular(path)
    except (FileNotFoundError, UnsafePathError) as exc:
        if isinstance(exc, UnsafePathError):
            _warn_once(path, str(exc))
        return
    with fh:
        fh.seek(offset)
        while True:
            header = fh.read(12)
            if len(header) < 12:
                return
            length, length_crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != length_crc:
                return
            if length > MAX_EVENT_BYTES:  # a record claiming 2^40 bytes would be read into memory whole
                _warn_once(path, f"{path} has an event record of {length:,} bytes (at most {MAX_EVENT_BYTES:,} "
                                 "are read); the rest of the file is skipped")
                return
            data = fh.read(length)
            if len(data) < length or len(fh.read(4)) < 4:
                return
            yield data, fh.tell()


def _warn_once(path: Path, message: str) -> None:
    if path not in _warned:
        _warned.add(path)
        logger.warning("%s", message)


def _scalar(value: event_pb2.summary_pb2.Summary.Value) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor"):
        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1 and array.dtype.kind in "fiub":
            return float(array.reshape(()))
    return None


class EventTail:
    """The scalars under a directory, read a little at a time while a trial writes them.

    Each ``poll`` reads only what was appended since the last one (an offset per
    event file), so watching a running trial costs its new records, not its history.
    The cloudml-hypertune file (at most 100 lines) is read whole each time.
    """

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory)
        self.series: dict[tuple[str, str], list[Point]] = {}
        self._offsets: dict[Path, int] = {}
        self._metric_file = MetricFile(self.root)

    def poll(self) -> bool:
        """Reads every new scalar; True if there was any."""
        if not self.root.is_dir():
            return False
        grew = self._poll_metric_file()
        for path in files_under(self.root, ("events.out.tfevents.*",)):
            run = path.parent.relative_to(self.root).as_posix()
            run = "" if run == "." else run
            offset = self._offsets.get(path, 0)
            for data, end in _records(path, offset):
                event = event_pb2.Event.FromString(data)
                for value in event.summary.value:
                    number = _scalar(value)
                    if number is not None:
                        self.series.setdefault((run, value.tag), []).append(
                            Point(event.step, event.wall_time, number))
                        grew = True
                offset = end
            self._offsets[path] = offset
        return grew

    def _poll_metric_file(self) -> bool:
        if not self._metric_file.poll():
            return False
        for tag, points in self._metric_file.series().items():
            self.series[(HYPERTUNE_RUN, tag)] = [Point(step, wall_time, value) for wall_time, step, value in points]
        return True


def read_scalars(directory: str | Path) -> dict[tuple[str, str], list[Point]]:
    """Every scalar under ``directory`` keyed by ``(run, tag)``; run ``""`` is the directory itself."""
    tail = EventTail(directory)
    tail.poll()
    return tail.series


def _run_rank(run: str) -> tuple[int, str]:
    return (_PREFERRED_RUNS.index(run) if run in _PREFERRED_RUNS else len(_PREFERRED_RUNS), run)


#: tags TensorFlow renamed, old -> what TF 2 writes instead, in the order tried: Keras 2.3 renamed ``acc``
#: ``accuracy`` (so ``epoch_acc`` became ``epoch_accuracy``), and TF 2's TensorBoard callback writes a
#: validation metric as ``validation/epoch_<name>`` where TF 1's wrote ``val_<name>``
RENAMED_TAGS = {
    "acc": ("accuracy", "epoch_accuracy"), "val_acc": ("val_accuracy", "validation/epoch_accuracy"),
    "epoch_acc": ("epoch_accuracy",), "batch_acc": ("batch_accuracy",),
    "epoch_val_acc": ("validation/epoch_accuracy",), "epoch_val_loss": ("validation/epoch_loss",),
}
_said: set[tuple[str, str]] = set()


def resolve_tag(keys: list[tuple[str, str]], tag: str) -> tuple[str, str] | None:
    """The ``(run, tag)`` that ``tag`` names among ``keys`` (see the module docstring), or None.

    A tag TensorFlow renamed (``epoch_acc``, ``acc``, ``val_acc``: ``RENAMED_TAGS``) that names
    nothing is followed to its TF 2 name, with a warning said once per process.
    """
    found = _resolve(keys, tag)
    if found is not None:
        return found
    run, _, name = tag.rpartition("/")
    for new in RENAMED_TAGS.get(name, ()):
        renamed = f"{run}/{new}" if run else new
        found = _resolve(keys, renamed)
        if found is not None:
            if (tag, renamed) not in _said:
                _said.add((tag, renamed))
                logger.warning("hyperparameterMetricTag %r is the name TF 1.x wrote; TF 2 writes %r, which the "
                               "study follows (found as %s). Rename the tag to %r to silence this.", tag, renamed,
                               "/".join(p for p in found if p), renamed)
            return found
    return None


def _resolve(keys: list[tuple[str, str]], tag: str) -> tuple[str, str] | None:
    exact = sorted((k for k in keys if k[1] == tag), key=lambda k: _run_rank(k[0]))
    if exact:
        return exact[0]
    run, _, name = tag.rpartition("/")
    if run and (run, name) in keys:
        return run, name
    if tag.startswith("val_") and ("validation", tag[4:]) in keys:
        return "validation", tag[4:]
    return None


def missing_tag(directory: str | Path, keys: list[tuple[str, str]], tag: str) -> TuningError:
    """The error for a tag that names none of ``keys`` (it lists them, so a typo is obvious)."""
    found = sorted(f"{run}/{name}" if run else name for run, name in keys)
    listing = ", ".join(found[:20]) + (" ..." if len(found) > 20 else "") if found else "no scalars at all"
    return TuningError(f"hyperparameterMetricTag {tag!r} names no scalar in the TensorBoard events under "
                       f"{directory} or in its {METRIC_FILE} (found: {listing}). Fix the tag, or call "
                       f"toolkit.report_metric({tag!r}, value, step) (or cloudml-hypertune's "
                       "report_hyperparameter_tuning_metric) in the trainer.")


def select(points: list[Point], *, goal: str, mode: str) -> Point:
    """The objective among a trial's measurements: ``BEST`` (NaNs skipped) or ``FINAL`` (largest step)."""
    if mode == "BEST":
        pick = max if goal == "MAXIMIZE" else min
        return pick([p for p in points if not math.isnan(p.value)] or points, key=lambda p: p.value)
    return max(points, key=lambda p: (p.step, p.wall_time))  # a NaN here is the truth: the run diverged


def read_objective(directory: str | Path, tag: str, *, goal: str, mode: str = "FINAL") -> tuple[float, int]:
    """The trial's objective and the step it was written at.

    Raises:
        TuningError: no events, or no scalar that ``tag`` names (the message
            lists the tags that exist, so a typo is obvious).
    """
    series = read_scalars(directory)
    key = resolve_tag(list(series), tag)
    if key is None:
        raise missing_tag(directory, list(series), tag)
    point = select(series[key], goal=goal, mode=mode)
    return point.value, point.step
