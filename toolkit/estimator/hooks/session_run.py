"""The session-run hooks ``tf.estimator`` re-exported from ``tf.compat.v1.train``.

``tf.estimator.StopAtStepHook`` and its siblings were TensorFlow's own
``tf.compat.v1.train`` classes under a second name; TF 2.21 still ships them
there, so ``toolkit.estimator`` serves the very same classes (an
``isinstance`` check against either name agrees, as it did in TF).

Example:
    >>> from toolkit.estimator import StopAtStepHook   # doctest: +SKIP
    >>> est.train(input_fn, hooks=[StopAtStepHook(last_step=100)])   # doctest: +SKIP
"""
from __future__ import annotations

from tensorflow.compat.v1 import train as _train

#: the 17 names ``tf.estimator`` re-exported from ``tf.compat.v1.train``
HOOK_NAMES = (
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues",
    "StopAtStepHook", "LoggingTensorHook", "CheckpointSaverHook", "CheckpointSaverListener",
    "StepCounterHook", "SummarySaverHook", "NanTensorHook", "NanLossDuringTrainingError",
    "GlobalStepWaiterHook", "FinalOpsHook", "FeedFnHook", "ProfilerHook", "SecondOrStepTimer",
)

SessionRunHook = _train.SessionRunHook
SessionRunArgs = _train.SessionRunArgs
SessionRunContext = _train.SessionRunContext
SessionRunValues = _train.SessionRunValues
StopAtStepHook = _train.StopAtStepHook
LoggingTensorHook = _train.LoggingTensorHook
CheckpointSaverHook = _train.CheckpointSaverHook
CheckpointSaverListener = _train.CheckpointSaverListener
StepCounterHook = _train.StepCounterHook
SummarySaverHook = _train.SummarySaverHook
NanTensorHook = _train.NanTensorHook
NanLossDuringTrainingError = _train.NanLossDuringTrainingError
GlobalStepWaiterHook = _train.GlobalStepWaiterHook
FinalOpsHook = _train.FinalOpsHook
FeedFnHook = _train.FeedFnHook
ProfilerHook = _train.ProfilerHook
SecondOrStepTimer = _train.SecondOrStepTimer

__all__ = list(HOOK_NAMES)
