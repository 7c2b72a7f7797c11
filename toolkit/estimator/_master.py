"""CMLE's ``master`` task: it trains as the chief and evaluates and exports every new checkpoint.

As ``tf.estimator``'s ``_TrainingExecutor.run_master``: a checkpoint-saver
listener evaluates the newest checkpoint after a save (at most one evaluation
per ``EvalSpec.throttle_secs``; a throttled checkpoint is skipped), runs the
exporters (the final export once an evaluation reaches ``TrainSpec.max_steps``),
and evaluates the last checkpoint when training ends if it was skipped. So a
CMLE job of master + workers + ps writes evaluation summaries and exports, and
its hyperparameter metric exists.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["EvaluateOnNewCheckpoint"]

logger = logging.getLogger(__name__)


class EvaluateOnNewCheckpoint(tf.compat.v1.train.CheckpointSaverListener):
    """Evaluates (and exports) a checkpoint just saved, throttled by ``throttle_secs``.

    Args:
        evaluate_and_export: ``(checkpoint_path, global_step) -> (eval result, export paths)``.
        throttle_secs: at most one evaluation per this many seconds.
        skip_first: skip the first save of a ``train`` call (the untrained model's checkpoint), as
            tf.estimator's local ``train_and_evaluate`` did.
    """

    def __init__(self, evaluate_and_export: Callable[[str, int], tuple[Any, list[str]]], latest: Callable[[], Any],
                 throttle_secs: float, *, skip_first: bool = False) -> None:
        self._evaluate_and_export, self._latest = evaluate_and_export, latest
        self._skip_first = self._skip_next = skip_first
        self._timer = tf.compat.v1.train.SecondOrStepTimer(every_secs=throttle_secs)
        self.eval_result: Any = None
        self.export_results: list[str] = []

    def begin(self) -> None:
        self._timer.reset()
        self._skip_next = self._skip_first

    def after_save(self, session: Any, global_step_value: int) -> None:
        if self._skip_next:
            self._skip_next = False
            return
        if self._timer.should_trigger_for_step(global_step_value):
            self._evaluate(global_step_value)
        else:
            logger.info("Skip the current checkpoint eval due to throttle secs (step %d)", global_step_value)

    def end(self, session: Any, global_step_value: int) -> None:
        if global_step_value != self._timer.last_triggered_step():
            self._evaluate(global_step_value)

    def _evaluate(self, global_step_value: int) -> None:
        self._timer.update_last_triggered_step(global_step_value)
        path = self._latest()
        if path is None:
            return
        self.eval_result, exports = self._evaluate_and_export(path, global_step_value)
        self.export_results.extend(exports)
