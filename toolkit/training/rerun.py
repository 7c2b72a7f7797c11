"""Running ``fit`` again on a ``model_dir`` that is already trained to the end.

Re-running a script or a notebook is normal. When the restored global step is
already ``epochs * steps_per_epoch`` there is nothing to train; ``fit`` says so
and still returns the run's final metrics, which the chief keeps beside its
checkpoints (``final_metrics.json``) at the end of every run. A ``model_dir``
from before that file existed gets one validation pass instead (its ``val_``
metrics), when there is a ``validation_fn``.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping

import tensorflow as tf

from toolkit.training.loop import LoopRecord
from toolkit.training.options import FitConfig

__all__ = ["FINAL_METRICS_FILE", "remember_or_recall"]

logger = logging.getLogger(__name__)

FINAL_METRICS_FILE = "final_metrics.json"


def _path(model_dir: str) -> str:
    return os.path.join(model_dir, FINAL_METRICS_FILE)


def _recall(model_dir: str) -> dict | None:
    try:
        with tf.io.gfile.GFile(_path(model_dir)) as fh:
            return json.load(fh)
    except (tf.errors.NotFoundError, FileNotFoundError, json.JSONDecodeError):
        return None


def _remember(model_dir: str, record: LoopRecord) -> None:
    doc = {"epoch": record.epochs[-1], "global_step": record.final_step,
           "logs": {name: values[-1] for name, values in record.history.items()}}
    tmp = f"{_path(model_dir)}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(tmp, "w") as fh:
        json.dump(doc, fh)
    tf.io.gfile.rename(tmp, _path(model_dir), overwrite=True)


def remember_or_recall(record: LoopRecord, *, model_dir: str, start_step: int, config: FitConfig, is_chief: bool,
                       validate: Callable[[], Mapping[str, float]] | None) -> LoopRecord:
    """The loop's record, completed when the run found nothing to train; the chief keeps the final metrics.

    Args:
        record: what ``run_loop`` returned.
        model_dir: the run's directory.
        start_step: the global step restored before the loop.
        config: the run's epochs and steps.
        is_chief: this task writes the file (others only read it).
        validate: one validation pass over the restored weights, for a
            ``model_dir`` without the file (None: no validation data).
    """
    if record.epochs:
        if is_chief:
            _remember(model_dir, record)
        return record
    total_steps = config.total_steps
    if start_step < total_steps:
        return record
    kept = _recall(model_dir)
    then = ("; the history holds that run's final metrics" if kept is not None
            else "; evaluating it once" if validate is not None else "")
    logger.warning("model_dir %s is already trained to global step %d (of %d): nothing to train%s. Use a new "
                   "model_dir (or more epochs) to train again.", model_dir, start_step, total_steps, then)
    if kept is not None:
        record.add(int(kept["epoch"]), kept["logs"], {})
    elif validate is not None:
        record.add(config.epochs - 1, validate(), {})
    return record
