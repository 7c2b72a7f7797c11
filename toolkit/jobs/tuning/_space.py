"""CMLE's search space as Optuna distributions, and the samplers by algorithm name.

The search itself is Optuna's; this module only translates. Each parameter
becomes one Optuna distribution under its own name:

==============================  ==================================================
DOUBLE / INTEGER, linear        ``FloatDistribution`` / ``IntDistribution``
UNIT_LOG_SCALE                  the same with ``log=True`` (log-uniform sampling)
UNIT_REVERSE_LOG_SCALE          Optuna samples ``z`` log-uniformly in [min, max]
                                and the trainer gets ``x = max + min - z``: dense
                                near ``max`` as ``z`` is dense near ``min``
DISCRETE                        ``CategoricalDistribution`` of the listed numbers
CATEGORICAL                     ``CategoricalDistribution`` of the listed strings
==============================  ==================================================

Because of the mirror, a reverse-log parameter's value in Optuna's tables is
``z``; the value the trainer received is kept with the trial (``values``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from toolkit.jobs.errors import JobSpecError, Problem, did_you_mean
from toolkit.jobs.model.hyperparams import HyperparameterSpec, ParameterSpec, grid_size

__all__ = ["SAMPLERS", "make_sampler", "distributions", "trial_values", "trial_args", "format_value",
           "grid_space", "trial_budget"]

_FIELD = "trainingInput.hyperparameters"


def _tpe(hp: HyperparameterSpec, seed: int | None) -> optuna.samplers.BaseSampler:
    # Few trials run at once here, so TPE's start-up phase is sized to the batch, not Optuna's default 10.
    startup = max(2, min(10, hp.max_trials // 3, 2 * hp.max_parallel_trials))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def _random(hp: HyperparameterSpec, seed: int | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler for ask/tell: Optuna's calls ``study.stop()`` when the grid is used up, which only
    works inside ``study.optimize``; the tuning loop caps its trials at the grid's size instead."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def _grid(hp: HyperparameterSpec, seed: int | None) -> optuna.samplers.BaseSampler:
    return _AskTellGridSampler(grid_space(hp), seed=seed)


# algorithm name -> sampler builder; BAYESIAN_OPTIMIZATION is what CMLE's default does.
SAMPLERS: dict[str, Callable[[HyperparameterSpec, int | None], optuna.samplers.BaseSampler]] = {
    "ALGORITHM_UNSPECIFIED": _tpe,
    "BAYESIAN_OPTIMIZATION": _tpe,
    "RANDOM_SEARCH": _random,
    "GRID_SEARCH": _grid,
}


def make_sampler(hp: HyperparameterSpec, *, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for ``hp.algorithm``; ``seed`` makes the sequence of trials reproducible."""
    builder = SAMPLERS.get(hp.algorithm)
    if builder is None:
        raise JobSpecError([Problem("error", f"{_FIELD}.algorithm", f"received {hp.algorithm!r}; expected one of "
                                    f"{', '.join(SAMPLERS)}.{did_you_mean(hp.algorithm, SAMPLERS)}")])
    return builder(hp, seed)


def _numeric(param: ParameterSpec) -> BaseDistribution:
    log = param.scale_type in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
    low, high = param.bounds()
    if param.type == "INTEGER":
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(float(low), float(high), log=log)


_DISTRIBUTIONS: dict[str, Callable[[ParameterSpec], BaseDistribution]] = {
    "DOUBLE": _numeric,
    "INTEGER": _numeric,
    "DISCRETE": lambda p: CategoricalDistribution(list(p.discrete_values)),
    "CATEGORICAL": lambda p: CategoricalDistribution(list(p.categorical_values)),
}


def distributions(hp: HyperparameterSpec) -> dict[str, BaseDistribution]:
    """What ``study.ask`` samples: one distribution per parameter name."""
    return {p.parameter_name: _DISTRIBUTIONS[p.type](p) for p in hp.params}


def grid_space(hp: HyperparameterSpec) -> dict[str, list[Any]]:
    """Every value of every parameter, for GridSampler; DOUBLE has no grid (the spec refuses it)."""
    space: dict[str, list[Any]] = {}
    for i, param in enumerate(hp.params):
        if param.type == "DOUBLE":
            raise JobSpecError([Problem("error", f"{_FIELD}.params[{i}].type", f"is DOUBLE, which GRID_SEARCH "
                                        f"cannot enumerate. Use INTEGER, DISCRETE or CATEGORICAL for "
                                        f"{param.parameter_name!r}, or algorithm RANDOM_SEARCH.")])
        if param.type == "INTEGER":
            low, high = param.bounds()
            space[param.parameter_name] = list(range(int(low), int(high) + 1))
        else:
            space[param.parameter_name] = list(param.categorical_values or param.discrete_values)
    return space


def trial_budget(hp: HyperparameterSpec) -> int:
    """Trials to run: ``maxTrials``, or fewer when a grid has fewer points (each point runs once)."""
    if hp.algorithm != "GRID_SEARCH":
        return hp.max_trials
    return min(hp.max_trials, math.prod(grid_size(p) for p in hp.params))


def trial_values(hp: HyperparameterSpec, sampled: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's sampled params -> the values the trainer gets (undoing the reverse-log mirror)."""
    values: dict[str, Any] = {}
    for param in hp.params:
        value = sampled[param.parameter_name]
        if param.scale_type == "UNIT_REVERSE_LOG_SCALE":
            low, high = param.bounds()
            value = high + low - value
            value = int(round(value)) if param.type == "INTEGER" else float(value)
        values[param.parameter_name] = value
    return values


def format_value(value: Any) -> str:
    """A flag value as the trainer parses it: whole DISCRETE numbers print as ints (``32``, not ``32.0``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_args(values: Mapping[str, Any]) -> list[str]:
    """``--name=value`` per parameter, appended to the job's own args (as CMLE does)."""
    return [f"--{name}={format_value(value)}" for name, value in values.items()]
