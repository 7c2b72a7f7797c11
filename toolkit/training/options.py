"""``fit``'s optional knobs, grouped by concern into small frozen, self-validating objects.

The simple call stays simple (``fit(model_fn, dataset_fn, epochs=...,
steps_per_epoch=...)``); a caller who cares about checkpoints, logging,
validation or synchronous updates passes one object for that concern inside
``fit(options=FitOptions(...))``, as Ray Train's ``RunConfig`` carries its
``CheckpointConfig``/``FailureConfig``:

    >>> CheckpointConfig(every=500, keep=5)
    CheckpointConfig(every=500, keep=5)
    >>> SyncConfig(replicas_to_aggregate=2).replicas_to_aggregate
    2
    >>> try:
    ...     LogConfig(every=0)
    ... except TrainingError as exc:
    ...     print(exc.field)
    LogConfig.every

``fit`` takes them in one ``FitOptions``; the engine reads them from ``FitConfig``
as they are. Each value is checked once, where it is declared.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tf_config.checks import check_int, check_number
from toolkit.training.config import TrainingError

if TYPE_CHECKING:
    from strategies import ServeOptions, StrategyOptions
    from tf_config import TFConfig

__all__ = ["CheckpointConfig", "FitConfig", "FitOptions", "LogConfig", "SyncConfig", "ValidationConfig"]


#: ``ServeOptions`` the chief's end of the job reads (at interpreter exit), not the servers ``fit`` starts
_CHIEF_SIDE = ("goodbye_timeout", "workers_done_timeout")


def _positive(field: str, value: object, example: str, *, optional: bool = False) -> None:
    """Checks a positive int; a group's field (``LogConfig.every``) is fixed by building that group."""
    owner, _, name = field.rpartition(".")
    check_int(value, field=field, example=example, optional=optional, error=TrainingError,
              fix=f"Pass e.g. {owner}({name}={example})." if owner else None)


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
        _positive("CheckpointConfig.every", self.every, "500", optional=True)
        _positive("CheckpointConfig.keep", self.keep, "3")


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
        _positive("LogConfig.every", self.every, "50", optional=True)
        _positive("LogConfig.summary_every", self.summary_every, "100")


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
        _positive("ValidationConfig.steps", self.steps, "10", optional=True)
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
        _positive("SyncConfig.replicas_to_aggregate", self.replicas_to_aggregate, "2", optional=True)


def _check_group(value: object, kind: type, name: str, *, optional: bool = False) -> None:
    """Refuses anything but a ``kind`` (or None when ``optional``), naming the class to pass."""
    if (value is None and optional) or isinstance(value, kind):
        return
    owner, _, attribute = name.rpartition(".")
    example = f"{owner}({attribute}={kind.__name__}())" if owner else f"{name}={kind.__name__}()"
    raise TrainingError(f"`{name}` must be a toolkit.training.{kind.__name__}{' or None' if optional else ''}. "
                        f"Received: {name}={value!r}. Pass e.g. {example}.", field=name)


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """The run the engine trains: its schedule and the option groups, each read as it is (never flattened).

    ``fit`` and Keras' ``model.fit`` (``enable_distributed_keras``) both describe their run with one.

    Attributes:
        epochs: number of epochs; an epoch is ``steps_per_epoch`` optimizer steps.
        steps_per_epoch: optimizer steps (global batches) per epoch.
        steps_per_execution: steps run per ``tf.function`` call (or per closure
            scheduled on a parameter-server worker). Larger values amortise the
            Python and RPC overhead, the main lever for small models. Both front
            doors take it from ``model.compile`` (Keras' default, 1). Chunks end
            exactly on checkpoint steps and epoch ends (a shorter execution), so
            results do not depend on it; the global step, and so a schedule,
            advances once per execution.
        global_batch_size: examples per step over all replicas, used to average
            the loss (None: inferred from the batch each replica receives).
        checkpoint, logs, validation: the groups above.
        sync: a ``SyncConfig`` for synchronous parameter-server updates (None: asynchronous).
    """

    epochs: int = 1
    steps_per_epoch: int = 100
    steps_per_execution: int = 1
    global_batch_size: int | None = None
    checkpoint: CheckpointConfig = CheckpointConfig()
    logs: LogConfig = LogConfig()
    validation: ValidationConfig = ValidationConfig()
    sync: SyncConfig | None = None

    def __post_init__(self) -> None:
        _positive("epochs", self.epochs, "5")
        _positive("steps_per_epoch", self.steps_per_epoch, "len(train) // global_batch_size")
        _positive("steps_per_execution", self.steps_per_execution, "10")
        _positive("global_batch_size", self.global_batch_size, "64", optional=True)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def checkpoint_interval(self) -> int:
        return self.checkpoint.every or self.steps_per_epoch

    @property
    def log_interval(self) -> int:
        return self.logs.every or max(1, self.steps_per_epoch // 10)


@dataclasses.dataclass(frozen=True)
class FitOptions:
    """``fit``'s knobs beyond what to train and for how long, one name each.

    Attributes:
        checkpoint: a ``CheckpointConfig`` (default: each epoch's end, keep 3).
        logs: a ``LogConfig`` (progress-log and TensorBoard intervals).
        validation: a ``ValidationConfig`` (validation batches, the evaluator's patience).
        sync: a ``SyncConfig`` turns on synchronous parameter-server updates; None (the default) is asynchronous.
        global_batch_size: see ``FitConfig``.
        forward: ``(model, features, labels, training) -> (per_example_loss,
            predictions)``, replacing the compiled ``loss`` for custom objectives.
        train_step: the per-replica step, the engine's seam: a ``TrainStep``
            subclass or a callable ``(state, forward, metrics, *,
            global_batch_size, sync) -> TrainStep``, called under the
            strategy's scope. None: ``TrainStep``, or
            ``toolkit.layers.ShardedTrainStep`` when the model has a ``ShardedEmbedding``.
        between_graph: under parameter servers, each worker runs its own
            graph-mode step loop on the ps variables (TF1's between-graph
            replication) instead of the chief scheduling closures
            (``toolkit.training.between_graph``). None (the default): when every
            worker runs ``fit`` and the step is the default ``TrainStep`` without
            ``sync``; True: always (else an error); False: never (the chief
            coordinates).
        export: write ``model.keras`` and a SavedModel to ``model_dir/export``.
        strategy: a ``strategies.StrategyOptions`` for ``make_strategy`` (None: its defaults).
        serve: a ``strategies.ServeOptions`` for the parameter-server ps and
            worker tasks ``fit`` serves in (None: ``ServeOptions.from_env()``).
            The chief's side of the goodbye reads the environment.
        tf_config: this task's ``TFConfig`` (None reads TF_CONFIG).
    """

    checkpoint: CheckpointConfig = CheckpointConfig()
    logs: LogConfig = LogConfig()
    validation: ValidationConfig = ValidationConfig()
    sync: SyncConfig | None = None
    global_batch_size: int | None = None
    forward: Callable[..., Any] | None = None
    train_step: Callable[..., Any] | None = None
    between_graph: bool | None = None
    export: bool = True
    strategy: StrategyOptions | None = None
    serve: ServeOptions | None = None
    tf_config: TFConfig | None = None

    def __post_init__(self) -> None:
        from strategies import ServeOptions, StrategyOptions
        from tf_config import TFConfig

        _check_group(self.checkpoint, CheckpointConfig, "FitOptions.checkpoint")
        _check_group(self.logs, LogConfig, "FitOptions.logs")
        _check_group(self.validation, ValidationConfig, "FitOptions.validation")
        _check_group(self.sync, SyncConfig, "FitOptions.sync", optional=True)
        for name, kind in (("strategy", StrategyOptions), ("serve", ServeOptions), ("tf_config", TFConfig)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TrainingError(f"`FitOptions.{name}` must be a {kind.__module__.split('.')[0]}.{kind.__name__} "
                                    f"or None. Received: {name}={value!r}. Pass e.g. {name}={kind.__name__}(...).",
                                    field=f"FitOptions.{name}")
        for name in _CHIEF_SIDE:  # the chief ends the job at exit, after fit returned: it reads TFDIST_<NAME>
            if self.serve is not None and getattr(self.serve, name) != ServeOptions.__dataclass_fields__[name].default:
                raise TrainingError(f"`FitOptions.serve` sets {name}={getattr(self.serve, name)!r}, which fit does "
                                    f"not pass to its servers. Set TFDIST_{name.upper()} in every task's environment "
                                    "instead: the chief's goodbye at exit reads it there.",
                                    field=f"FitOptions.serve.{name}")
        for name in ("between_graph", "export"):
            if not isinstance(getattr(self, name), bool) and (name, getattr(self, name)) != ("between_graph", None):
                raise TrainingError(f"`FitOptions.{name}` must be True or False. Received: "
                                    f"{name}={getattr(self, name)!r}.", field=f"FitOptions.{name}")

    def run_config(self, *, epochs: int, steps_per_epoch: int, steps_per_execution: int = 1) -> FitConfig:
        """The engine's ``FitConfig`` for this run: the groups go in as they are."""
        return FitConfig(epochs=epochs, steps_per_epoch=steps_per_epoch, steps_per_execution=steps_per_execution,
                         global_batch_size=self.global_batch_size, checkpoint=self.checkpoint, logs=self.logs,
                         validation=self.validation, sync=self.sync)
