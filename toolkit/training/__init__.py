"""The distributed Keras 3 training engine behind ``toolkit.fit``.

The pieces are public so that higher layers (an Estimator-style API, a
synchronous parameter-server mode) reuse them instead of writing a second loop:

* ``FitOptions`` with ``CheckpointConfig``, ``LogConfig``, ``ValidationConfig``, ``SyncConfig``: ``fit``'s
  options, by concern; ``FitConfig``: the run the engine trains;
* ``build_state`` / ``TrainState``: model, optimizer and an atomic global step;
* ``TrainStep`` / ``EvalStep`` with a pluggable ``Forward`` (per-example loss); ``TrainStep``
  is the seam new kinds of update subclass (``variables``, ``tape_scope``, ``apply``,
  ``counts_steps``), e.g. ``toolkit.layers.ShardedTrainStep``, passed as ``FitOptions(train_step=...)``;
* runners (``SyncRunner``, ``ParameterServerRunner``, ``SyncParameterServerRunner``) chosen through
  ``RUNNERS``;
* ``run_loop`` and its hooks (checkpoints, summaries, progress, callbacks).

Example:
    >>> from toolkit.training import fit
"""
from toolkit.training.config import TrainingError
from toolkit.training.evaluation import Validator, evaluate_continuously, run_sidecar_evaluator
from toolkit.training.export import export_model
from toolkit.training.fit import fit
from toolkit.training.history import History
from toolkit.training.hooks import CallbackHook, CheckpointHook, LogHook, ProgressHook, SummaryHook
from toolkit.training.loop import EVENT_KINDS, Hook, LoopEvent, LoopRecord, run_loop
from toolkit.training.options import CheckpointConfig, FitConfig, FitOptions, LogConfig, SyncConfig, ValidationConfig
from toolkit.training.runners import (
                                      RUNNERS,
                                      ParameterServerRunner,
                                      Runner,
                                      SyncParameterServerRunner,
                                      SyncRunner,
                                      make_runner,
                                      strategy_kind,
)
from toolkit.training.state import GlobalStepSchedule, TrainState, build_state
from toolkit.training.step import (
                                      EvalStep,
                                      Forward,
                                      StatLayout,
                                      SummedMetric,
                                      TrainStep,
                                      after_updates,
                                      make_forward,
                                      resolve_metrics,
)

__all__ = [
    "EVENT_KINDS", "CallbackHook", "CheckpointConfig", "CheckpointHook", "EvalStep", "FitConfig", "FitOptions",
    "Forward", "GlobalStepSchedule", "History", "Hook", "LogConfig", "LogHook", "LoopEvent", "LoopRecord",
    "ParameterServerRunner", "ProgressHook", "RUNNERS", "Runner", "StatLayout", "SummedMetric", "SummaryHook",
    "SyncConfig", "SyncParameterServerRunner", "SyncRunner", "TrainState", "TrainStep", "TrainingError",
    "ValidationConfig", "Validator",
    "after_updates", "build_state", "evaluate_continuously", "export_model", "fit", "make_forward", "make_runner",
    "resolve_metrics", "run_loop", "run_sidecar_evaluator", "strategy_kind",
]
