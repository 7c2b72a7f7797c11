"""Trial early stopping: which Optuna pruner, built by name, and when it may speak.

``enableTrialEarlyStopping: true`` stops a trial whose measurements fall behind.
The decision is an Optuna pruner's (``trial.should_prune()``), asked only once
the trial has ``earlyStopping.minMeasurements`` measurements; before that a
trial is never stopped. MEDIAN is the default, as Vertex's median stopping:

=====================  ========================================================
``pruner``             Optuna pruner
=====================  ========================================================
MEDIAN                 ``MedianPruner``: stop when the trial's best measurement
                       so far is worse than the median of the finished trials'
                       measurements at the same step
PERCENTILE             ``PercentilePruner(percentile)``: the same with another cut
SUCCESSIVE_HALVING     ``SuccessiveHalvingPruner`` (asynchronous successive halving)
HYPERBAND              ``HyperbandPruner``
=====================  ========================================================

MEDIAN and PERCENTILE wait for ``startupTrials`` finished trials (default
``maxParallelTrials``, so the first batch always runs to its end) and compare
trials at equal steps, so they suit trials that measure at the same steps.
"""
from __future__ import annotations

from collections.abc import Callable

import optuna

from toolkit.jobs.model.hyperparams import EarlyStoppingSpec, HyperparameterSpec

__all__ = ["PRUNERS", "make_pruner", "may_stop"]


def _median(stopping: EarlyStoppingSpec, startup: int) -> optuna.pruners.BasePruner:
    return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=0)


def _percentile(stopping: EarlyStoppingSpec, startup: int) -> optuna.pruners.BasePruner:
    return optuna.pruners.PercentilePruner(stopping.percentile, n_startup_trials=startup, n_warmup_steps=0)


def _successive_halving(stopping: EarlyStoppingSpec, startup: int) -> optuna.pruners.BasePruner:
    return optuna.pruners.SuccessiveHalvingPruner()


def _hyperband(stopping: EarlyStoppingSpec, startup: int) -> optuna.pruners.BasePruner:
    return optuna.pruners.HyperbandPruner()


# earlyStopping.pruner -> builder(stopping spec, startup trials); hyperparams.PRUNERS lists the same names.
PRUNERS: dict[str, Callable[[EarlyStoppingSpec, int], optuna.pruners.BasePruner]] = {
    "MEDIAN": _median,
    "PERCENTILE": _percentile,
    "SUCCESSIVE_HALVING": _successive_halving,
    "HYPERBAND": _hyperband,
}


def make_pruner(hp: HyperparameterSpec) -> optuna.pruners.BasePruner:
    """The study's pruner; ``NopPruner`` when early stopping is off (measurements are still reported)."""
    if not hp.enable_trial_early_stopping:
        return optuna.pruners.NopPruner()
    stopping = hp.early_stopping
    startup = hp.max_parallel_trials if stopping.startup_trials is None else stopping.startup_trials
    return PRUNERS[stopping.pruner](stopping, startup)


def may_stop(hp: HyperparameterSpec, measurements: int) -> bool:
    """Whether the pruner may be asked about a trial with this many measurements."""
    return hp.enable_trial_early_stopping and measurements >= hp.early_stopping.min_measurements
