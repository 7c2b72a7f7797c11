"""The ``trainingInput.hyperparameters`` block: a tuning study, parsed and checked.

Everything the tuner (``toolkit.jobs.tuning``) could trip over later is caught
here, at submit time: a DOUBLE in a grid, a grid too large to enumerate, a log
scale over a range that reaches 0. ``hyperparameterMetricValue`` (FINAL or
BEST) is tfdist's one addition to CMLE's fields: which value of the metric's
curve counts as the trial's objective.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.jobs.model._fields import FieldReader

__all__ = ["EarlyStoppingSpec", "HyperparameterSpec", "ParameterSpec", "grid_size", "read_hyperparameters"]

GOALS = ("MAXIMIZE", "MINIMIZE")
ALGORITHMS = ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH", "BAYESIAN_OPTIMIZATION")
METRIC_VALUES = ("FINAL", "BEST")
# Vertex's measurementSelectionType -> the same choice in hyperparameterMetricValue's words
MEASUREMENT_SELECTIONS = {"LAST_MEASUREMENT": "FINAL", "BEST_MEASUREMENT": "BEST"}
PRUNERS = ("MEDIAN", "PERCENTILE", "SUCCESSIVE_HALVING", "HYPERBAND")
DEFAULT_MIN_MEASUREMENTS = 3
MAX_GRID_POINTS = 10_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
PARAM_TYPES = ("DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE")
SCALE_TYPES = ("NONE", "UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
DEFAULT_METRIC_TAG = "training/hptuning/metric"
_STUDY_KEYS = ("goal", "hyperparameterMetricTag", "maxTrials", "maxParallelTrials",
               "maxFailedTrials", "algorithm", "params", "enableTrialEarlyStopping",
               "resumePreviousJobId", "hyperparameterMetricValue", "measurementSelectionType",
               "earlyStopping")
_STOPPING_KEYS = ("pruner", "minMeasurements", "startupTrials", "percentile")
_PARAM_KEYS = ("parameterName", "type", "minValue", "maxValue", "categoricalValues",
               "discreteValues", "scaleType")
# CMLE passes the name through unchanged as --NAME=value, so hyphens are common
# (the official samples use first-layer-size, learning-rate, train-batch-size).
_PARAM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class ParameterSpec:
    """One tuned parameter; passed to the trainer unchanged as ``--<parameter_name>=<value>``.

    Names are letters, digits, ``_`` and ``-``, not starting with ``-``.
    """

    parameter_name: str
    type: str
    min_value: float | None = None
    max_value: float | None = None
    categorical_values: tuple[str, ...] = ()
    discrete_values: tuple[float, ...] = ()
    scale_type: str = "NONE"

    def bounds(self) -> tuple[float, float]:
        """``(min_value, max_value)`` of a DOUBLE or INTEGER parameter (the spec reader requires both)."""
        if self.min_value is None or self.max_value is None:
            raise ValueError(f"parameter {self.parameter_name!r} ({self.type}) has no minValue/maxValue")
        return self.min_value, self.max_value

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"parameterName": self.parameter_name, "type": self.type}
        if self.min_value is not None:
            doc["minValue"], doc["maxValue"] = self.min_value, self.max_value
        if self.categorical_values:
            doc["categoricalValues"] = list(self.categorical_values)
        if self.discrete_values:
            doc["discreteValues"] = list(self.discrete_values)
        if self.scale_type != "NONE":
            doc["scaleType"] = self.scale_type
        return doc


@dataclass(frozen=True)
class EarlyStoppingSpec:
    """How ``enableTrialEarlyStopping`` decides (tfdist's ``earlyStopping`` block; every key optional).

    Attributes:
        pruner: the Optuna pruner, by name (``PRUNERS``); MEDIAN stops a trial whose best
            measurement so far is worse than the median of the finished trials' at the same step.
        min_measurements: a trial is never stopped before it has this many measurements.
        startup_trials: no trial is stopped before this many trials have finished
            (None: ``maxParallelTrials``, so the first batch always runs to its end).
        percentile: PERCENTILE keeps trials in this top percentile at each step (25: the best
            quarter runs on); MEDIAN is PERCENTILE at 50.
    """

    pruner: str = "MEDIAN"
    min_measurements: int = DEFAULT_MIN_MEASUREMENTS
    startup_trials: int | None = None
    percentile: float = 25.0

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"pruner": self.pruner, "minMeasurements": self.min_measurements}
        if self.startup_trials is not None:
            doc["startupTrials"] = self.startup_trials
        if self.pruner == "PERCENTILE":
            doc["percentile"] = self.percentile
        return doc


@dataclass(frozen=True)
class HyperparameterSpec:
    """A tuning study: what to optimise, how many trials, and the search space."""

    goal: str
    params: tuple[ParameterSpec, ...]
    hyperparameter_metric_tag: str = DEFAULT_METRIC_TAG
    max_trials: int = 1
    max_parallel_trials: int = 1
    max_failed_trials: int = 0
    algorithm: str = "ALGORITHM_UNSPECIFIED"
    enable_trial_early_stopping: bool = False
    resume_previous_job_id: str | None = None
    metric_value: str = "FINAL"
    early_stopping: EarlyStoppingSpec = EarlyStoppingSpec()

    @property
    def measurement_selection(self) -> str:
        """``LAST_MEASUREMENT`` or ``BEST_MEASUREMENT``: Vertex's name for ``metric_value``."""
        return {v: k for k, v in MEASUREMENT_SELECTIONS.items()}[self.metric_value]

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "goal": self.goal, "hyperparameterMetricTag": self.hyperparameter_metric_tag,
            "maxTrials": self.max_trials, "maxParallelTrials": self.max_parallel_trials,
            "maxFailedTrials": self.max_failed_trials, "algorithm": self.algorithm,
            "params": [p.to_dict() for p in self.params],
        }
        if self.enable_trial_early_stopping:
            doc["enableTrialEarlyStopping"] = True
        if self.early_stopping != EarlyStoppingSpec():
            doc["earlyStopping"] = self.early_stopping.to_dict()
        if self.resume_previous_job_id:
            doc["resumePreviousJobId"] = self.resume_previous_job_id
        if self.metric_value != "FINAL":
            doc["hyperparameterMetricValue"] = self.metric_value
        return doc


def read_hyperparameters(reader: FieldReader, value: object, path: str) -> HyperparameterSpec | None:
    """Parses the block at ``path``; problems go to ``reader``; None if absent or invalid."""
    if value is None:
        return None
    doc = reader.mapping(value, path)
    reader.check_keys(doc, path, _STUDY_KEYS)
    goal = reader.choice(doc, "goal", path, GOALS, default=None)
    if "goal" not in doc:
        reader.missing(f"{path}.goal", f"one of {', '.join(GOALS)}",
                     "Say whether the metric should go up (MAXIMIZE) or down (MINIMIZE).")
    max_trials = reader.integer(doc, "maxTrials", path, default=1, minimum=1)
    max_parallel = reader.integer(doc, "maxParallelTrials", path, default=1, minimum=1)
    if max_parallel and max_trials and max_parallel > max_trials:
        reader.warn(f"{path}.maxParallelTrials",
                    f"is {max_parallel} but maxTrials is {max_trials}; at most {max_trials} run at once.")
    study: dict[str, Any] = dict(  # the reader's values, checked field by field
        hyperparameter_metric_tag=reader.string(doc, "hyperparameterMetricTag", path) or DEFAULT_METRIC_TAG,
        max_trials=max_trials, max_parallel_trials=max_parallel,
        max_failed_trials=reader.integer(doc, "maxFailedTrials", path, default=0, minimum=0),
        algorithm=reader.choice(doc, "algorithm", path, ALGORITHMS, default="ALGORITHM_UNSPECIFIED"),
        enable_trial_early_stopping=reader.boolean(doc, "enableTrialEarlyStopping", path, default=False),
        resume_previous_job_id=reader.string(doc, "resumePreviousJobId", path),
        metric_value=_read_selection(reader, doc, path),
        early_stopping=_read_early_stopping(reader, doc, path),
    )
    params = _read_params(reader, doc.get("params"), f"{path}.params")
    if study["algorithm"] == "GRID_SEARCH":
        _check_grid(reader, params, path)
        if study["enable_trial_early_stopping"]:
            reader.warn(f"{path}.enableTrialEarlyStopping",
                        "with GRID_SEARCH: a grid point whose trial is stopped early is not run again, so its "
                        "objective is its best measurement before the stop. Use another algorithm to search "
                        "the space fully at the same budget.")
    if goal is None or not params:
        return None
    return HyperparameterSpec(goal=goal, params=params, **study)


def _read_selection(reader: FieldReader, doc: Mapping[str, Any], path: str) -> str:
    """FINAL or BEST, from ``hyperparameterMetricValue`` or Vertex's ``measurementSelectionType``."""
    value = reader.choice(doc, "hyperparameterMetricValue", path, METRIC_VALUES, default=None)
    selection = reader.choice(doc, "measurementSelectionType", path, MEASUREMENT_SELECTIONS, default=None)
    if value and selection and MEASUREMENT_SELECTIONS[selection] != value:
        reader.fail(f"{path}.measurementSelectionType",
                    f"is {selection} but hyperparameterMetricValue is {value}; they choose the same thing. "
                    "Keep one of them.")
    return (MEASUREMENT_SELECTIONS[selection] if selection else value) or "FINAL"


def _read_early_stopping(reader: FieldReader, doc: Mapping[str, Any], path: str) -> EarlyStoppingSpec:
    value = doc.get("earlyStopping")
    if value is None:
        return EarlyStoppingSpec()
    where = f"{path}.earlyStopping"
    block = reader.mapping(value, where)
    reader.check_keys(block, where, _STOPPING_KEYS)
    if not doc.get("enableTrialEarlyStopping"):
        reader.warn(where, "has no effect without `enableTrialEarlyStopping: true`; add it to stop "
                           "unpromising trials, or remove the block.")
    percentile = reader.number(block, "percentile", where)
    if percentile is not None and not 0 < percentile < 100:
        reader.error(f"{where}.percentile", block["percentile"], "a number between 0 and 100 (exclusive)",
                     "25 keeps the best quarter of the trials at each step running.")
        percentile = None
    return EarlyStoppingSpec(
        pruner=reader.choice(block, "pruner", where, PRUNERS, default="MEDIAN") or "MEDIAN",
        min_measurements=reader.integer(block, "minMeasurements", where, default=DEFAULT_MIN_MEASUREMENTS,
                                        minimum=1) or DEFAULT_MIN_MEASUREMENTS,
        startup_trials=reader.integer(block, "startupTrials", where, default=None, minimum=0),
        percentile=25.0 if percentile is None else float(percentile))


def _check_grid(reader: FieldReader, params: tuple[ParameterSpec, ...], path: str) -> None:
    """A grid must be finite and small enough to list: no DOUBLE, at most MAX_GRID_POINTS points."""
    points = 1
    for i, param in enumerate(params):
        if param.type == "DOUBLE":
            reader.fail(f"{path}.params[{i}].type",
                        f"is DOUBLE, which GRID_SEARCH cannot enumerate. Use INTEGER, DISCRETE or "
                        f"CATEGORICAL for {param.parameter_name!r}, or algorithm RANDOM_SEARCH.")
            return
        points *= grid_size(param)
    if points > MAX_GRID_POINTS:
        reader.fail(f"{path}.params", f"span a grid of {points} points; GRID_SEARCH lists at most "
                                      f"{MAX_GRID_POINTS}. Narrow the INTEGER ranges or use RANDOM_SEARCH.")


def grid_size(param: ParameterSpec) -> int:
    """How many values of ``param`` a grid search visits (DOUBLE has no finite grid: 0)."""
    if param.type == "INTEGER":
        low, high = param.bounds()
        return int(high) - int(low) + 1
    return len(param.categorical_values or param.discrete_values)


def _read_params(reader: FieldReader, value: object, path: str) -> tuple[ParameterSpec, ...]:
    if not isinstance(value, list) or not value:
        reader.error(path, value, "a non-empty list of parameters",
                     "Add at least one item with parameterName and type.")
        return ()
    params, seen = [], set()
    for i, item in enumerate(value):
        param = _read_param(reader, reader.mapping(item, f"{path}[{i}]"), f"{path}[{i}]")
        if param is None:
            continue
        if param.parameter_name in seen:
            reader.fail(f"{path}[{i}].parameterName",
                        f"{param.parameter_name!r} is listed twice; each parameter needs a unique name.")
        seen.add(param.parameter_name)
        params.append(param)
    return tuple(params)


def _read_param(reader: FieldReader, doc: Mapping[str, Any], path: str) -> ParameterSpec | None:
    reader.check_keys(doc, path, _PARAM_KEYS)
    before = len(reader.problems)
    name = reader.string(doc, "parameterName", path, pattern=_PARAM_NAME,
                         expected="a name of letters, digits, '_' and '-', not starting with '-'",
                         fix="It is passed to the trainer unchanged as --<parameterName>=<value>.")
    if "parameterName" not in doc:
        reader.missing(f"{path}.parameterName", "a parameter name", "Add `parameterName: learning_rate`.")
    kind = reader.choice(doc, "type", path, PARAM_TYPES, default=None)
    if "type" not in doc:
        reader.missing(f"{path}.type", f"one of {', '.join(PARAM_TYPES)}", "Add the parameter's type.")
    scale = reader.choice(doc, "scaleType", path, SCALE_TYPES, default="NONE")
    fields: dict[str, Any] = {}
    if kind in ("DOUBLE", "INTEGER"):
        fields = _read_range(reader, doc, path, kind, scale)
    elif kind == "CATEGORICAL":
        values = reader.string_list(doc, "categoricalValues", path)
        if not values or len(set(values)) != len(values):
            reader.error(f"{path}.categoricalValues", doc.get("categoricalValues"),
                         "a non-empty list of distinct strings", "List each choice once.")
        elif any(_CONTROL.search(value) for value in values):  # each value is printed by describe and list
            reader.error(f"{path}.categoricalValues", next(v for v in values if _CONTROL.search(v)),
                         "strings without control characters (an escape sequence would drive the terminal of "
                         "whoever reads the job)", "Remove them.")
        fields = {"categorical_values": values}
    elif kind == "DISCRETE":
        fields = {"discrete_values": _read_discrete(reader, doc.get("discreteValues"), path)}
    if kind in ("CATEGORICAL", "DISCRETE") and scale != "NONE":
        reader.fail(f"{path}.scaleType", f"is {scale}, but scaleType applies only to DOUBLE and "
                                         "INTEGER parameters. Remove it.")
    if len(reader.problems) != before or name is None or kind is None:
        return None
    return ParameterSpec(parameter_name=name, type=kind, scale_type=scale or "NONE", **fields)


def _read_range(reader: FieldReader, doc: Mapping[str, Any], path: str, kind: str,
                scale: str | None) -> dict[str, Any]:
    low, high = reader.number(doc, "minValue", path), reader.number(doc, "maxValue", path)
    for key, number in (("minValue", low), ("maxValue", high)):
        if key not in doc:
            reader.missing(f"{path}.{key}", f"a number ({kind} parameters need a range)",
                         f"Add `{key}`.")
        elif kind == "INTEGER" and number is not None and not float(number).is_integer():
            reader.error(f"{path}.{key}", doc[key], "a whole number for an INTEGER parameter",
                         "Use a whole number, or make the parameter DOUBLE.")
    if low is not None and high is not None and low >= high:
        reader.fail(f"{path}.minValue", f"is {low:g} but maxValue is {high:g}; minValue must be "
                                        "smaller. Swap them or widen the range.")
    if scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE") and low is not None and low <= 0:
        reader.fail(f"{path}.minValue", f"is {low:g}, but {scale} needs a range above 0. "
                                        "Raise minValue or use UNIT_LINEAR_SCALE.")
    return {"min_value": low, "max_value": high}


def _read_discrete(reader: FieldReader, value: object, path: str) -> tuple[float, ...]:
    numbers = isinstance(value, list) and value and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not numbers or not isinstance(value, list) or sorted(set(value)) != value:
        reader.error(f"{path}.discreteValues", value, "a non-empty list of numbers in increasing order",
                     "List each value once, smallest first.")
        return ()
    return tuple(float(v) for v in value)
