"""Evaluation: the chief's per-epoch validation and the sidecar evaluator task.

Both evaluate in one process on the whole validation set (or
``validation_steps`` batches) with the model's current variables, wherever
those live: a parameter-server coordinator reads them from the ps, a
MultiWorkerMirrored chief reads its local copy. That keeps the numbers exact
and needs no collective, so the other workers never wait on validation.

The sidecar evaluator (TF_CONFIG task type ``evaluator``) is the Estimator
pattern: it watches ``model_dir``, evaluates each new checkpoint once, writes
``<model_dir>/eval`` summaries, and exits after the final checkpoint.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from toolkit.training.loop import LoopRecord
from toolkit.training.step import EvalStep, Forward, MetricFn

__all__ = ["Validator", "run_sidecar_evaluator", "DONE_FILE", "write_done_marker", "read_done_marker"]

logger = logging.getLogger(__name__)

DONE_FILE = "training_done.json"
_POLL_SECONDS = 2.0


class Validator:
    """Evaluates a model on ``validation_fn``'s dataset; returns ``val_`` logs."""

    def __init__(self, model: keras.Model, validation_fn: Callable[..., tf.data.Dataset], *, forward: Forward,
                 metrics: Mapping[str, MetricFn], steps: int | None = None, prefix: str = "val_") -> None:
        self.step = EvalStep(model, forward, metrics)
        self.validation_fn, self.steps, self.prefix = validation_fn, steps, prefix
        self._run = tf.function(self._batch)

    def _batch(self, features: Any, labels: Any) -> tf.Tensor:
        return self.step(features, labels)

    def totals(self) -> np.ndarray:
        dataset = self.validation_fn(tf.distribute.InputContext())
        if self.steps is not None:
            dataset = dataset.take(self.steps)
        totals = np.zeros([self.step.layout.width], np.float64)
        for features, labels in dataset:
            totals += self._run(features, labels).numpy()
        if totals[0] == 0:
            logger.warning("validation dataset is empty; val_ metrics are 0")
        return totals

    def __call__(self) -> dict[str, float]:
        return self.step.layout.to_logs(self.totals(), prefix=self.prefix)


def write_done_marker(model_dir: str, step: int) -> None:
    """Tells a sidecar evaluator that no checkpoint will follow ``step`` (atomic rename)."""
    path = os.path.join(model_dir, DONE_FILE)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"global_step": step}, fh)
    os.replace(tmp, path)


def read_done_marker(model_dir: str) -> int | None:
    """The final global step the chief recorded in ``model_dir``, or None while it still trains."""
    try:
        with open(os.path.join(model_dir, DONE_FILE), encoding="utf-8") as fh:
            return int(json.load(fh)["global_step"])
    except FileNotFoundError:
        return None


def run_sidecar_evaluator(model_fn: Callable[[], keras.Model], validation_fn: Callable[..., tf.data.Dataset], *,
                          forward: Forward, metrics: Mapping[str, MetricFn], model_dir: str, final_step: int,
                          steps: int | None = None, timeout: float = 600.0) -> LoopRecord:
    """Evaluates each new checkpoint in ``model_dir`` once, until the final one.

    Stops after evaluating a checkpoint at ``final_step`` (or at the step the
    chief recorded in ``training_done.json`` when training stopped early), or
    when no new checkpoint appears for ``timeout`` seconds.

    Returns:
        A ``LoopRecord`` with one entry per evaluated checkpoint (``epochs``
        holds the global steps).
    """
    model = model_fn()
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(model=model, global_step=global_step)
    validator = Validator(model, validation_fn, forward=forward, metrics=metrics, steps=steps, prefix="")
    writer = tf.summary.create_file_writer(os.path.join(model_dir, "eval"))
    record, last = LoopRecord(), {"path": None, "time": time.monotonic()}

    def finished() -> bool:
        done = read_done_marker(model_dir)
        if done is not None and tf.train.latest_checkpoint(model_dir) == last["path"]:
            return True
        if time.monotonic() - last["time"] > timeout:
            logger.warning("evaluator: no new checkpoint in %s for %.0f s; stopping", model_dir, timeout)
            return True
        return False

    for path in tf.train.checkpoints_iterator(model_dir, min_interval_secs=0.5, timeout=_POLL_SECONDS,
                                              timeout_fn=finished):
        checkpoint.restore(path).expect_partial()
        step = int(global_step.numpy())
        logs = validator()
        with writer.as_default(step=step):
            for name, value in logs.items():
                tf.summary.scalar(name, value)
        writer.flush()
        record.add(step, logs, {})
        record.final_step = step
        last.update(path=path, time=time.monotonic())
        logger.info("evaluator: step %d %s", step, " ".join(f"{k}={v:.4f}" for k, v in logs.items()))
        if step >= final_step or step == read_done_marker(model_dir):
            break
    writer.close()
    return record
