"""Chief duties as plain callables: checkpoints, summaries, progress, callbacks, logs.

Each hook takes a ``LoopEvent`` and does one job. ``fit`` gives the chief all of
them and the other tasks only what they must do (MultiWorkerMirrored workers
still save, into a private temporary directory, because saving can involve
collectives every worker has to join).
"""
from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import keras
import tensorflow as tf

from toolkit.training.loop import LoopEvent
from toolkit.training.preemption import record_save_seconds, watcher

__all__ = ["CheckpointHook", "SummaryHook", "ProgressHook", "CallbackHook", "LogHook"]

logger = logging.getLogger(__name__)


class CheckpointHook:
    """Saves every ``every`` global steps and at the end; keeps the newest ``keep``.

    ``tf.train.CheckpointManager`` writes the data files first and the
    ``checkpoint`` index last, so a reader never sees a half-written checkpoint.
    With ``temporary=True`` the directory is deleted at the end (non-chief workers).
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, *, every: int, keep: int,
                 temporary: bool = False) -> None:
        self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep, checkpoint_name="ckpt")
        self.directory, self.every, self.temporary = directory, every, temporary
        self.last_saved: int | None = None

    def save_now(self, step: int) -> bool:
        """Saves at ``step`` (on schedule, or off it on a preemption); False if that step was saved (or restored)."""
        if step == self.last_saved:
            return False
        start = time.monotonic()
        path = self.manager.save(checkpoint_number=step)
        self.last_saved = step
        seconds = time.monotonic() - start
        logger.info("checkpoint saved at step %d in %.2f s: %s", step, seconds, path)
        if not self.temporary:
            preemption = watcher()
            record_save_seconds(self.directory, seconds, preemption.options.preemption_grace)
        return True

    def discard_scratch(self) -> None:
        """Removes a ``temporary`` directory now (a preempted task does not reach ``train_end``)."""
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __call__(self, event: LoopEvent) -> None:
        if event.kind == "train_begin":
            # The restored step is saved already; every task agrees on it, so saves stay in step.
            self.last_saved = event.step
        elif event.kind == "steps_end" and event.step // self.every > (self.last_saved or 0) // self.every:
            # normally a multiple of ``every``; past one when a re-run closure counted twice
            self.save_now(event.step)
        elif event.kind == "train_end":
            self.save_now(event.step)
            self.discard_scratch()


class SummaryHook:
    """TensorBoard scalars: loss, metrics, steps/sec, examples/sec, learning rate.

    Training scalars go to ``<model_dir>/train``; the ``val_`` metrics of each
    epoch go to ``<model_dir>/validation`` under the same names, so TensorBoard
    overlays the two curves.
    """

    def __init__(self, model_dir: str, *, every: int, learning_rate: Callable[[], float]) -> None:
        self.train = tf.summary.create_file_writer(tf.io.gfile.join(model_dir, "train"))
        self.validation = tf.summary.create_file_writer(tf.io.gfile.join(model_dir, "validation"))
        self.every, self.learning_rate = every, learning_rate
        self._last = -1

    def _write(self, event: LoopEvent) -> None:
        train = {k: v for k, v in event.logs.items() if not k.startswith("val_")}
        with self.train.as_default(step=event.step):
            for name, value in {**train, **event.rates, "learning_rate": self.learning_rate()}.items():
                tf.summary.scalar(name, value)
        validation = {k[len("val_"):]: v for k, v in event.logs.items() if k.startswith("val_")}
        if validation:
            with self.validation.as_default(step=event.step):
                for name, value in validation.items():
                    tf.summary.scalar(name, value)
        self._last = event.step

    def __call__(self, event: LoopEvent) -> None:
        if event.kind == "steps_end" and event.step - max(self._last, 0) >= self.every:
            self._write(event)
        elif event.kind == "epoch_end":
            self._write(event)
            self.train.flush()
            self.validation.flush()
        elif event.kind == "train_end":
            self.train.close()
            self.validation.close()


class ProgressHook:
    """A Keras progress bar on the chief's console, one per epoch.

    On a terminal it redraws in place; when stdout is a pipe or a file it
    prints one line per epoch instead of a line per update.
    """

    def __init__(self, *, epochs: int, steps_per_epoch: int, metric_names: Sequence[str]) -> None:
        self.epochs, self.steps_per_epoch = epochs, steps_per_epoch
        names = ["loss", *metric_names]
        self.stateful = [*names, *(f"val_{n}" for n in names)]
        self.verbose = 1 if sys.stdout.isatty() else 2
        self.bar: keras.utils.Progbar | None = None

    def __call__(self, event: LoopEvent) -> None:
        if event.kind == "epoch_begin":
            print(f"Epoch {event.epoch + 1}/{self.epochs}", flush=True)
            self.bar = keras.utils.Progbar(self.steps_per_epoch, verbose=self.verbose,
                                           stateful_metrics=self.stateful, unit_name="step")
            self.bar.update(event.epoch_step, finalize=False)
        elif event.kind == "steps_end" and self.bar is not None:
            self.bar.update(event.epoch_step, values=list(event.logs.items()), finalize=False)
        elif event.kind == "epoch_end" and self.bar is not None:
            self.bar.update(event.epoch_step, values=list(event.logs.items()), finalize=True)
            sys.stdout.flush()


class LogHook:
    """One log line per epoch: what non-chief tasks show instead of a progress bar."""

    def __init__(self, task: str, *, epochs: int) -> None:
        self.task, self.epochs = task, epochs

    def __call__(self, event: LoopEvent) -> None:
        if event.kind == "epoch_end":
            metrics = " ".join(f"{k}={v:.4f}" for k, v in event.logs.items())
            logger.info("%s epoch %d/%d step %d: %s (%.1f steps/s)", self.task, event.epoch + 1, self.epochs,
                        event.step, metrics, event.rates.get("steps_per_sec", 0.0))


class CallbackHook:
    """Gives Keras callbacks their train/epoch/batch hooks (on the chief only).

    Batch hooks fire once per chunk of steps, like Keras with
    ``steps_per_execution``: ``batch`` is the index of the chunk's last step.
    """

    def __init__(self, callbacks: Sequence[keras.callbacks.Callback], *, model: keras.Model, epochs: int,
                 steps_per_epoch: int) -> None:
        self.callbacks = keras.callbacks.CallbackList(list(callbacks), model=model, epochs=epochs,
                                                      steps=steps_per_epoch, verbose=0)
        self._dispatch: Mapping[str, Callable[[LoopEvent], object]] = {
            "train_begin": lambda e: self.callbacks.on_train_begin(),
            "epoch_begin": lambda e: self.callbacks.on_epoch_begin(e.epoch),
            "steps_begin": lambda e: self.callbacks.on_train_batch_begin(e.epoch_step),
            "steps_end": lambda e: self.callbacks.on_train_batch_end(max(e.epoch_step - 1, 0), dict(e.logs)),
            "epoch_end": lambda e: self.callbacks.on_epoch_end(e.epoch, dict(e.logs)),
            "train_end": lambda e: self.callbacks.on_train_end(dict(e.logs)),
        }

    def __call__(self, event: LoopEvent) -> None:
        self._dispatch[event.kind](event)
