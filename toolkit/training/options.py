"""``fit``'s optional knobs, grouped by concern into small frozen, self-validating objects.

The simple call stays simple (``fit(model_fn, dataset_fn, loss=..., epochs=...,
steps_per_epoch=...)``); a caller who cares about checkpoints, logging,
validation or synchronous updates passes one object for that concern, as Ray
Train's ``ScalingConfig``/``CheckpointConfig``/``FailureConfig`` do:

    >>> CheckpointConfig(every=500, keep=5)
    CheckpointConfig(every=500, keep=5)
    >>> SyncConfig(replicas_to_aggregate=2).replicas_to_aggregate
    2
    >>> try:
    ...     LogConfig(every=0)
    ... except TrainingError as exc:
    ...     print(exc.field)
    LogConfig.every

``fit`` refuses the flat keywords these objects replaced with a ``TypeError``
that names the new home (``MOVED``).
"""
from __future__ import annotations

import dataclasses
from typing import TypeVar

from tf_config.checks import check_int, check_number
from toolkit.training.config import FitConfig, TrainingError

__all__ = ["MOVED", "CheckpointConfig", "LogConfig", "SyncConfig", "ValidationConfig", "fit_config", "group",
           "moved_keywords_error"]


def _positive_int(owner: str, name: str, value: object, example: str, *, optional: bool = False) -> None:
    check_int(value, field=f"{owner}.{name}", optional=optional, error=TrainingError,
              fix=f"Pass e.g. {owner}({name}={example}).")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints the chief writes to ``model_dir`` (a checkpoint is always written at the end).

    Attributes:
        every: a checkpoint every this many global steps (None: at each epoch's end).
        keep: how many checkpoints ``tf.train.CheckpointManager`` keeps.
    """

    every: int | None = None
    keep: int = 3

    def __post_init__(self) -> None:
        _positive_int("CheckpointConfig", "every", self.every, "500", optional=True)
        _positive_int("CheckpointConfig", "keep", self.keep, "3")


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """How often the loop reports.

    Attributes:
        every: under parameter_server, the coordinator waits for the scheduled
            steps and logs progress this often (None: ten times an epoch, but
            at least four executions per worker between waits). Synchronous
            strategies report after every execution.
        summary_every: TensorBoard scalars this often (plus every epoch end).
    """

    every: int | None = None
    summary_every: int = 100

    def __post_init__(self) -> None:
        _positive_int("LogConfig", "every", self.every, "50", optional=True)
        _positive_int("LogConfig", "summary_every", self.summary_every, "100")


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """How ``validation_fn`` is used.

    Attributes:
        steps: batches per validation (None: the whole validation set).
        evaluator_timeout: an evaluator task gives up after this many seconds
            without a new checkpoint.
    """

    steps: int | None = None
    evaluator_timeout: float = 600.0

    def __post_init__(self) -> None:
        _positive_int("ValidationConfig", "steps", self.steps, "10", optional=True)
        check_number(self.evaluator_timeout, field="ValidationConfig.evaluator_timeout", unit="seconds",
                     error=TrainingError, fix="Pass e.g. ValidationConfig(evaluator_timeout=600).")


@dataclasses.dataclass(frozen=True)
class SyncConfig:
    """Synchronous parameter-server updates (TF1's SyncReplicasOptimizer); passing one turns them on.

    Each update averages ``replicas_to_aggregate`` worker contributions instead
    of applying every worker's gradients as they arrive; contributions computed
    on an outdated global step are dropped. Only ``strategy="parameter_server"``
    accepts it. Epochs, checkpoints and schedules count aggregated updates.

    Attributes:
        replicas_to_aggregate: contributions per update (None: one per worker).
    """

    replicas_to_aggregate: int | None = None

    def __post_init__(self) -> None:
        _positive_int("SyncConfig", "replicas_to_aggregate", self.replicas_to_aggregate, "2", optional=True)


#: the flat ``fit`` keywords the groups replaced -> how to say it now
MOVED: dict[str, str] = {
    "checkpoint_every_steps": "checkpoint=CheckpointConfig(every=...)",
    "keep_checkpoints": "checkpoint=CheckpointConfig(keep=...)",
    "log_every_steps": "logs=LogConfig(every=...)",
    "summary_every_steps": "logs=LogConfig(summary_every=...)",
    "validation_steps": "validation=ValidationConfig(steps=...)",
    "evaluator_timeout": "validation=ValidationConfig(evaluator_timeout=...)",
    "sync_replicas": "sync=SyncConfig()",
    "replicas_to_aggregate": "sync=SyncConfig(replicas_to_aggregate=...)",
}


def moved_keywords_error(given: dict[str, object]) -> TypeError:
    """The error for keywords ``fit`` does not take: the moved ones name their new home."""
    moved = [f"{name}= is now {MOVED[name]}" for name in given if name in MOVED]
    unknown = sorted(name for name in given if name not in MOVED)
    parts = []
    if moved:
        parts.append("fit() groups its options: " + "; ".join(moved) + " (from toolkit.training import "
                     + ", ".join(sorted({MOVED[n].split("=", 1)[1].split("(")[0] for n in given if n in MOVED}))
                     + ").")
    if unknown:
        parts.append(f"fit() got unexpected keyword argument(s): {', '.join(unknown)}.")
    return TypeError(" ".join(parts))


_G = TypeVar("_G", CheckpointConfig, LogConfig, ValidationConfig, SyncConfig)


def group(value: _G | None, kind: type[_G]) -> _G:
    """``value``, or the group's defaults for None; anything else names the class to pass."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        name = {CheckpointConfig: "checkpoint", LogConfig: "logs", ValidationConfig: "validation",
                SyncConfig: "sync"}[kind]
        raise TrainingError(f"`{name}` must be a toolkit.training.{kind.__name__} or None. Received: "
                            f"{name}={value!r}. Pass e.g. {name}={kind.__name__}().", field=name)
    return value


def fit_config(*, epochs: int, steps_per_epoch: int, steps_per_execution: int | None, global_batch_size: int | None,
                checkpoint: CheckpointConfig, logs: LogConfig, validation: ValidationConfig,
                sync: SyncConfig | None) -> FitConfig:
    """The loop's ``FitConfig`` from ``fit``'s arguments and groups."""
    if sync is not None:
        group(sync, SyncConfig)
    return FitConfig(epochs=epochs, steps_per_epoch=steps_per_epoch, steps_per_execution=steps_per_execution,
                     checkpoint_every_steps=checkpoint.every, keep_checkpoints=checkpoint.keep,
                     log_every_steps=logs.every, summary_every_steps=logs.summary_every,
                     validation_steps=validation.steps, global_batch_size=global_batch_size,
                     sync_replicas=sync is not None, replicas_to_aggregate=None if sync is None else
                     sync.replicas_to_aggregate)
