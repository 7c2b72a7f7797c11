"""The engine: one set-up of restore, runner, hooks, validation and the loop for every front door.

``toolkit.fit`` and Keras' ``model.fit`` (``enable_distributed_keras``)
translate their arguments into an ``EngineRun`` and a built ``TrainState``, get
their step from ``build_step`` (the one step factory: a custom step, the one
registered for the model, or the default), and hand them to ``train``;
everything after that (which checkpoint to resume from, which runner, which
hooks on which task, when to validate, what the record holds) is decided here
once, so the two front doors cannot drift apart. As Orbit's ``Controller``, the engine is given its parts
(state, step, the directories, the callbacks) and builds no model itself.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from toolkit.training.config import TrainingError
from toolkit.training.evaluation import Validator, WorkerValidator
from toolkit.training.extensions import step_factory_for
from toolkit.training.hooks import CallbackHook, CheckpointHook, LogHook, ProgressHook, SummaryHook
from toolkit.training.loop import Hook, LoopRecord, run_loop
from toolkit.training.options import FitConfig
from toolkit.training.preemption_loop import LoopPreemption
from toolkit.training.rerun import remember_or_recall
from toolkit.training.runners import Runner, make_runner, strategy_kind
from toolkit.training.state import TrainState
from toolkit.training.step import Forward, ResolvedMetric, TrainStep

if TYPE_CHECKING:
    from tf_config import TFConfig

__all__ = ["EngineResult", "EngineRun", "Task", "build_step", "task_of", "train"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Task:
    """This process's part in the strategy's job."""

    kind: str  # strategy_kind: "parameter_server", "sync", ...
    is_chief: bool
    workers: int  # input pipelines that split the data
    name: str


def task_of(strategy: tf.distribute.Strategy, cfg: TFConfig | None = None) -> Task:
    """The task ``cfg`` (None: TF_CONFIG) describes, under ``strategy``."""
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if cfg is None else cfg
    kind = strategy_kind(strategy)
    if kind == "parameter_server":
        workers = len(cfg.cluster.get("worker", ()))
    elif isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        workers = cfg.num_workers
    else:
        workers = 1
    name = "local" if cfg.is_local else f"{cfg.task_type}-{cfg.task_index}"
    return Task(kind=kind, is_chief=cfg.is_chief or cfg.is_local, workers=max(workers, 1), name=name)


@dataclasses.dataclass(frozen=True)
class EngineRun:
    """A run as a front door describes it to the engine.

    Attributes:
        config: the schedule and option groups (``steps_per_execution`` None: the engine chooses).
        dataset_fn: a dataset_fn, or a dataset of global batches; ``forward``/``metrics`` also validate.
        checkpoint_dir: where the chief checkpoints and the run resumes from (None: no checkpoints);
            ``restore_field`` names it in errors. ``summary_dir``: the chief's TensorBoard scalars.
        first_step: the global step to start from when nothing is restored (Keras' ``initial_epoch``).
        validation_data: None where this task does not validate; ``workers_validate``: under
            parameter servers the workers evaluate shards and the chief adds up.
        keep_final_metrics: remember the final metrics in ``checkpoint_dir`` for a re-run (``rerun``).
    """

    config: FitConfig
    task: Task
    dataset_fn: Callable[..., tf.data.Dataset] | tf.data.Dataset
    forward: Forward
    metrics: Mapping[str, ResolvedMetric]
    checkpoint_dir: str | None = None
    restore_field: str = "model_dir"
    summary_dir: str | None = None
    first_step: int = 0
    callbacks: Sequence[keras.callbacks.Callback] = ()
    verbose: int = 0
    validation_data: Any = None
    validation_freq: int = 1
    workers_validate: bool = False
    keep_final_metrics: bool = False


def build_step(state: TrainState, strategy: tf.distribute.Strategy, forward: Forward,
               metrics: Mapping[str, ResolvedMetric], *, config: FitConfig, workers: int = 1,
               factory: Callable[..., TrainStep] | None = None) -> TrainStep:
    """The per-replica step, built under ``strategy``'s scope: the front door's ``factory``, else the step
    registered for the model (``ShardedTrainStep`` for sharded tables, ``toolkit.training.extensions``),
    else ``TrainStep``; with a ``SyncReplicas`` aggregator when ``config.sync`` is set."""
    with strategy.scope():
        sync = None
        if config.sync is not None:
            from strategies.sync_replicas import SyncReplicas

            sync = SyncReplicas(state.optimizer, state.model.trainable_variables, global_step=state.global_step,
                                replicas_to_aggregate=config.sync.replicas_to_aggregate or max(workers, 1))
        step = (factory or step_factory_for(state.model, TrainStep))(
            state, forward, metrics, global_batch_size=config.global_batch_size, sync=sync)
    if not isinstance(step, TrainStep):
        raise TrainingError(
            f"`train_step` returned {type(step).__name__}; it must return a toolkit.training.TrainStep. "
            "Pass a TrainStep subclass (or a callable with its constructor's arguments).", field="train_step")
    return step


@dataclasses.dataclass(frozen=True)
class EngineResult:
    """What ``train`` leaves: the loop's record and synchronous-update counts."""

    record: LoopRecord
    sync_stats: dict[str, int]


def _restore(state: TrainState, directory: str, field: str) -> int | None:
    """Restores the newest checkpoint in ``directory``, if any; returns its global step."""
    path = tf.train.latest_checkpoint(directory)
    if path is None:
        return None
    status = state.checkpoint().restore(path)
    try:
        status.assert_existing_objects_matched()
    except AssertionError as exc:
        raise TrainingError(
            f"`{field}` holds checkpoint {path} that does not match the model and optimizer built now "
            f"({str(exc).splitlines()[0]}). Use a new directory, or the model and optimizer that wrote it.",
            field=field) from exc
    what = "" if field == "model_dir" else "the backup "  # Keras' BackupAndRestore
    logger.info("restored %s%s at global step %d", what, path, state.step)
    return state.step


def _learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The current rate, whether a schedule's tensor or a (possibly mirrored) variable."""
    value = optimizer.learning_rate
    if isinstance(value, keras.Variable):
        value = value.value
    return float(tf.convert_to_tensor(value))


def _hooks(run: EngineRun, state: TrainState, runner: Runner) -> list[Hook]:
    config, task = run.config, run.task
    hooks: list[Hook] = []
    if task.is_chief:
        if run.checkpoint_dir is not None:
            hooks.append(CheckpointHook(state.checkpoint(), run.checkpoint_dir, every=config.checkpoint_interval,
                                        keep=config.checkpoint.keep))
        if run.summary_dir is not None:
            hooks.append(SummaryHook(run.summary_dir, every=config.logs.summary_every,
                                     learning_rate=lambda: _learning_rate(state.optimizer)))
        if run.verbose:
            hooks.append(ProgressHook(epochs=config.epochs, steps_per_epoch=config.steps_per_epoch,
                                      metric_names=list(run.metrics)))
    elif run.checkpoint_dir is not None and not runner.single_controller:
        # A MultiWorkerMirrored worker saves too (a save may involve collectives), where nobody reads: under the
        # launcher's task directory when there is one, so a task killed mid-run leaves its scratch in the job's.
        scratch = tempfile.mkdtemp(prefix=f"tfdist-{task.name}-", dir=os.environ.get("TFDIST_TASK_DIR") or None)
        hooks.append(CheckpointHook(state.checkpoint(), scratch, every=config.checkpoint_interval, keep=1,
                                    temporary=True))
    if run.callbacks:
        hooks.append(CallbackHook(list(run.callbacks), model=state.model, epochs=config.epochs,
                                  steps_per_epoch=config.steps_per_epoch))
    hooks.append(LogHook(task.name, epochs=config.epochs))
    return hooks


def _validator(run: EngineRun, state: TrainState, runner: Runner,
               first_epoch: int) -> Callable[[], Mapping[str, float]] | None:
    if run.validation_data is None:
        return None
    steps = run.config.validation.steps
    coordinator = getattr(runner, "coordinator", None)
    validator: Validator
    if run.workers_validate and coordinator is not None:  # the workers evaluate; the chief only adds up
        validator = WorkerValidator(state.model, run.validation_data, forward=run.forward, metrics=run.metrics,
                                    steps=steps, coordinator=coordinator, shards=run.task.workers)
    else:
        validator = Validator(state.model, run.validation_data, forward=run.forward, metrics=run.metrics,
                              steps=steps)
    if run.validation_freq == 1:
        return validator
    epochs = iter(range(first_epoch, 1 << 62))

    def validate() -> Mapping[str, float]:
        return validator() if (next(epochs) + 1) % run.validation_freq == 0 else {}

    return validate


def train(run: EngineRun, state: TrainState, step: TrainStep, strategy: tf.distribute.Strategy, *,
          runner: Callable[..., Runner] | None = None) -> EngineResult:
    """Resumes, runs the loop with the task's hooks and validation, and returns what it recorded.

    ``state`` (built under ``strategy``) and ``step`` are built before this call, so the state a step adds
    is restored too. ``runner`` builds the runner from ``(strategy, step, global_step, *, skip_steps,
    num_workers, sync_every)`` (None: ``make_runner`` with ``run.dataset_fn``).
    """
    config = run.config
    logger.debug("train step: %s, steps per execution: %s", type(step).__name__, config.steps_per_execution)
    restored = None if run.checkpoint_dir is None else _restore(state, run.checkpoint_dir, run.restore_field)
    start = run.first_step if restored is None else restored
    if restored is None:
        state.global_step.assign(start)  # a compiled Keras model's second fit starts where it is told to
    state.model.stop_training = False
    # A parameter-server coordinator that waits too often leaves workers idle: keep every worker busy
    # for a few executions between waits unless the user asked for a log interval.
    sync_every = config.logs.every or max(config.log_interval,
                                          4 * run.task.workers * (config.steps_per_execution))
    if runner is None:
        built = make_runner(strategy, step, state.global_step, dataset_fn=run.dataset_fn, skip_steps=restored or 0,
                            num_workers=run.task.workers, sync_every=sync_every)
    else:
        built = runner(strategy, step, state.global_step, skip_steps=restored or 0, num_workers=run.task.workers,
                       sync_every=sync_every)
    validate = _validator(run, state, built, first_epoch=start // config.steps_per_epoch)
    hooks = _hooks(run, state, built)
    record = run_loop(built, config=config, layout=step.layout, start_step=start, hooks=hooks,
                      validate=validate, stop_requested=lambda: bool(state.model.stop_training),
                      check_preemption=LoopPreemption(built, hooks).check)
    if run.keep_final_metrics and run.checkpoint_dir is not None:  # a re-run on a finished directory
        record = remember_or_recall(record, model_dir=run.checkpoint_dir, start_step=start, config=config,
                                    is_chief=run.task.is_chief, validate=validate)
    built.close()
    stats = built.sync_stats()
    if stats:
        logger.info("synchronous updates: %s", " ".join(f"{k}={v}" for k, v in stats.items()))
    return EngineResult(record=record, sync_stats=stats)
