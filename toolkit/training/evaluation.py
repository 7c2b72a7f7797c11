"""Evaluation: the chief's per-epoch validation and the sidecar evaluator task.

Validation covers the whole validation set (or ``ValidationConfig.steps`` batches)
exactly once with the model's current variables, wherever those live:

* Under parameter servers the workers evaluate (``WorkerValidator``): the
  coordinator schedules one closure per shard of the validation set and adds
  up what they return, so the chief neither reads the data nor runs the model.
* Otherwise the chief evaluates in its own process (``Validator``): a
  MultiWorkerMirrored chief reads its local copy of the variables, needs no
  collective, and the other workers never wait on validation.

The sidecar evaluator (TF_CONFIG task type ``evaluator``) is the Estimator
pattern: it watches ``model_dir``, evaluates each new checkpoint once, writes
``<model_dir>/eval`` summaries, and exits after the final checkpoint.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import keras
import numpy as np
import tensorflow as tf

from toolkit.training.loop import LoopRecord
from toolkit.training.runners import sum_fetched
from toolkit.training.step import EvalStep, Forward, Nest, ResolvedMetric

_R = TypeVar("_R")  # what one evaluation returns

__all__ = ["DONE_FILE", "Validator", "WorkerValidator", "checkpoint_step", "evaluate_continuously", "read_done_marker",
           "run_sidecar_evaluator", "write_done_marker"]

logger = logging.getLogger(__name__)

DONE_FILE = "training_done.json"


class Validator:
    """Evaluates a model on ``validation_fn``'s dataset; returns ``val_`` logs."""

    def __init__(self, model: keras.Model, validation_fn: Callable[..., tf.data.Dataset], *, forward: Forward,
                 metrics: Mapping[str, ResolvedMetric], steps: int | None = None, prefix: str = "val_") -> None:
        self.step = EvalStep(model, forward, metrics)
        self.validation_fn, self.steps, self.prefix = validation_fn, steps, prefix
        self._run = tf.function(self._batch)

    def _batch(self, features: Nest, labels: Nest) -> tf.Tensor:
        return self.step(features, labels)

    def _dataset(self) -> tf.data.Dataset:
        dataset = self.validation_fn(tf.distribute.InputContext())
        return dataset if self.steps is None else dataset.take(self.steps)

    def totals(self) -> np.ndarray:
        totals = np.zeros([self.step.layout.width], np.float64)
        for features, labels in self._dataset():
            totals += self._run(features, labels).numpy()
        return totals

    def __call__(self) -> dict[str, float]:
        totals = self.totals()
        if totals[0] == 0:
            logger.warning("validation dataset is empty; val_ metrics are 0")
        return self.step.layout.to_logs(totals, prefix=self.prefix)


class WorkerValidator(Validator):
    """Parameter servers: the workers evaluate, the chief adds up their totals.

    The validation set is cut into ``shards`` (``dataset.shard``), and each
    shard is one closure that builds the dataset on the worker running it,
    evaluates its part and returns the totals. Every example counts exactly
    once, whichever worker runs a shard and however often the coordinator
    retries a closure after a worker failure.

    ``validation_fn`` is traced into the closure, as the training
    ``dataset_fn`` is. (A ``Dataset.from_generator`` still works: TensorFlow
    runs the generator in the chief's process and the worker asks it for each
    batch.) If the workers cannot evaluate, e.g. a ``validation_fn`` that
    only works eagerly (``dataset.cardinality().numpy()``) or data only the
    chief can read, a warning says why and the chief validates from then on.
    """

    def __init__(self, model: keras.Model, validation_fn: Callable[..., tf.data.Dataset], *, forward: Forward,
                 metrics: Mapping[str, ResolvedMetric], coordinator: tf.distribute.experimental.coordinator.
                 ClusterCoordinator, shards: int, steps: int | None = None, prefix: str = "val_") -> None:
        super().__init__(model, validation_fn, forward=forward, metrics=metrics, steps=steps, prefix=prefix)
        self.coordinator, self.shards = coordinator, max(1, shards)
        self.on_workers = True
        self._shard = tf.function(self._evaluate_shard)

    def _evaluate_shard(self, index: tf.Tensor) -> tf.Tensor:
        total = tf.zeros([self.step.layout.width], tf.float64)
        for features, labels in iter(self._dataset().shard(self.shards, index)):
            total += tf.cast(self.step(features, labels), tf.float64)
        return total

    def totals(self) -> np.ndarray:
        if self.on_workers:
            try:
                remotes = [self.coordinator.schedule(self._shard, args=(tf.constant(i, tf.int64),))
                           for i in range(self.shards)]
                totals = sum_fetched(remotes, self.step.layout.width)
                logger.info("validated on the workers: %d shards", self.shards)
                return totals
            except Exception as error:  # noqa: BLE001 - the chief's evaluation below raises a real error again
                with contextlib.suppress(Exception):
                    self.coordinator.join()  # the coordinator re-raises a closure's error once; consume it
                lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
                reason = lines[-1] if lines[0] == "in user code:" else lines[0]  # autograph puts the cause last
                logger.warning("validation on the workers failed (%s: %s); validating on the chief from now on. "
                               "A validation_fn that traces into a tf.function and reads data every worker "
                               "can read lets the workers validate.", type(error).__name__, reason[:300])
                self.on_workers = False
        return super().totals()


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


def checkpoint_step(path: str) -> int:
    """The global step of checkpoint ``path``: its ``-<step>`` suffix, else its ``global_step`` variable."""
    match = re.search(r"-(\d+)$", path)
    if match:
        return int(match.group(1))
    return int(tf.train.load_variable(path, "global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def _checkpoint_gone(path: str) -> bool:
    """Whether the chief pruned ``path``: its index or data files are gone, or the state file no longer lists it.

    Pruning deletes the files one by one in no set order, so a reader can meet a
    checkpoint whose data is gone while its index is still there.
    """
    if not tf.io.gfile.glob(f"{path}.index") or not tf.io.gfile.glob(f"{path}.data-*"):
        return True
    state = tf.train.get_checkpoint_state(os.path.dirname(path) or ".")
    listed = {os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else ())}
    return bool(listed) and os.path.basename(path) not in listed


def evaluate_continuously(model_dir: str, evaluate: Callable[[str], _R], *, final_step: int | None = None,
                          timeout: float = 600.0, throttle_secs: float = 0.0, poll_secs: float = 0.5,
                          step_of: Callable[[str], int] = checkpoint_step) -> list[tuple[int, _R]]:
    """Calls ``evaluate(checkpoint_path)`` on each new checkpoint in ``model_dir`` until training is over.

    The one checkpoint poller of the sidecar evaluators (``fit``'s evaluator
    task and the Estimator's): it knows nothing about models, only
    checkpoints, so any evaluator (eager Keras, a TF1 graph) plugs in.

    * Only the newest checkpoint is evaluated; ones written in between are skipped.
    * A checkpoint deleted between listing and reading it (the chief's
      ``CheckpointConfig.keep`` pruned it) is skipped with a warning, and the
      poller goes on with the next one: an error raised by ``evaluate`` or
      ``step_of`` while the checkpoint's files are gone is not fatal.

    It returns after evaluating the final checkpoint (global step >=
    ``final_step``, or the step in the chief's done marker), when the chief's
    done marker names a step already seen, or when no new checkpoint appears
    for ``timeout`` seconds.

    Example:
        >>> results = evaluate_continuously("runs/job", lambda path: my_eval(path), final_step=1000)  # doctest: +SKIP

    Args:
        model_dir: the directory the chief checkpoints into.
        evaluate: ``evaluate(checkpoint_path) -> result``.
        final_step: the last step training will reach (None: only the done marker says).
        timeout: seconds without a new checkpoint before giving up.
        throttle_secs: minimum seconds between two evaluations (the final checkpoint is never skipped).
        poll_secs: seconds between polls of ``model_dir``.
        step_of: the global step of a checkpoint path.

    Returns:
        ``[(global_step, evaluate's result), ...]`` in the order evaluated.
    """
    results: list[tuple[int, _R]] = []
    last_path, last_step, last_new, last_eval = None, None, time.monotonic(), float("-inf")
    while True:
        done = read_done_marker(model_dir)
        path = tf.train.latest_checkpoint(model_dir)
        if path is not None and path != last_path:
            last_path, last_new = path, time.monotonic()
            try:
                step = step_of(path)
                final = (final_step is not None and step >= final_step) or step == done
                if final or time.monotonic() - last_eval >= throttle_secs:
                    results.append((step, evaluate(path)))
                    last_eval = time.monotonic()
                else:
                    logger.info("evaluator: skipping checkpoint at step %d (throttle_secs=%g)", step, throttle_secs)
            except (tf.errors.OpError, ValueError) as exc:
                if not _checkpoint_gone(path):
                    raise
                logger.warning("evaluator: checkpoint %s was deleted before it could be evaluated (the chief keeps "
                               "only the newest ones); going on with the next (%s)", path, str(exc).splitlines()[0])
                continue
            last_step = step
            if final:
                return results
            continue
        if done is not None and (last_step is None or last_step >= done or path is None):
            logger.info("evaluator: training finished at step %d", done)
            return results
        if time.monotonic() - last_new > timeout:
            logger.warning("evaluator: no new checkpoint in %s for %.0f s; stopping", model_dir, timeout)
            return results
        time.sleep(poll_secs)


def run_sidecar_evaluator(model_fn: Callable[[], keras.Model], validation_fn: Callable[..., tf.data.Dataset], *,
                          forward: Forward | None = None, model_dir: str, final_step: int,
                          steps: int | None = None, timeout: float = 600.0) -> LoopRecord:
    """Evaluates each new checkpoint in ``model_dir`` once, until the final one (``evaluate_continuously``).

    The loss and metrics are the ones ``model_fn`` compiled its model with
    (``forward``, if given, replaces the loss).

    Returns:
        A ``LoopRecord`` with one entry per evaluated checkpoint (``epochs``
        holds the global steps).
    """
    from toolkit.training.compiled import read_compiled

    model = model_fn()
    learn = read_compiled(model, tf.distribute.get_strategy(), forward=forward)
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(model=model, global_step=global_step)
    validator = Validator(model, validation_fn, forward=learn.forward(), metrics=learn.metrics, steps=steps, prefix="")
    writer = tf.summary.create_file_writer(os.path.join(model_dir, "eval"))
    record = LoopRecord()

    def evaluate(path: str) -> dict[str, float]:
        checkpoint.restore(path).expect_partial()
        step = int(global_step.numpy())
        logs = validator()
        with writer.as_default(step=step):
            for name, value in logs.items():
                tf.summary.scalar(name, value)
        writer.flush()
        record.add(step, logs, {})
        record.final_step = step
        logger.info("evaluator: step %d %s", step, " ".join(f"{k}={v:.4f}" for k, v in logs.items()))
        return logs

    try:
        evaluate_continuously(model_dir, evaluate, final_step=final_step, timeout=timeout)
    finally:
        writer.close()
    return record
