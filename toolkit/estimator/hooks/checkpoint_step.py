"""``make_stop_at_checkpoint_step_hook``: stop every task once the chief's checkpoint reaches ``last_step``.

The chief stops at ``last_step`` (``StopAtStepHook``) and writes its final
checkpoint; a worker stops only when a checkpoint at ``last_step`` exists, so it
never leaves while the chief still needs its steps (sync replicas).
"""
from __future__ import annotations

import time
from typing import Any

import tensorflow as tf

__all__ = ["make_stop_at_checkpoint_step_hook"]

v1 = tf.compat.v1


class _StopAtCheckpointStepHook(tf.compat.v1.train.SessionRunHook):
    """Stops once the newest checkpoint in ``model_dir`` is at ``last_step`` or beyond."""

    def __init__(self, model_dir: str, last_step: int, wait_after_file_check_secs: float = 30) -> None:
        from toolkit.estimator._construct import EstimatorError

        if last_step is None:
            raise EstimatorError("last_step must be specified: the global step at which to stop.", field="last_step")
        if model_dir is None:
            raise EstimatorError("model_dir must be specified: where the chief writes its checkpoints.",
                                 field="model_dir")
        self._model_dir, self._last_step, self._wait = model_dir, last_step, wait_after_file_check_secs

    def begin(self) -> None:
        self._global_step = v1.train.get_global_step()
        if self._global_step is None:
            raise RuntimeError("Global step should be created to use StopAtCheckpointStepHook.")

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if run_values.results + 1 < self._last_step:
            return
        path = tf.train.latest_checkpoint(self._model_dir)
        step = int(tf.train.load_variable(path, v1.GraphKeys.GLOBAL_STEP)) if path else 0
        if step >= self._last_step:
            run_context.request_stop()
        else:
            time.sleep(self._wait)


def make_stop_at_checkpoint_step_hook(estimator: Any, last_step: int, wait_after_file_check_secs: float = 30) -> Any:
    """The chief's ``StopAtStepHook(last_step)``; elsewhere a hook that waits for the chief's checkpoint."""
    if estimator.config.is_chief:
        return v1.train.StopAtStepHook(last_step=last_step)
    return _StopAtCheckpointStepHook(estimator.model_dir, last_step, wait_after_file_check_secs)
