"""``fit``: train a Keras 3 model with the same code under every tf.distribute strategy.

Keras 3's own ``model.fit`` fails under ParameterServerStrategy and
MultiWorkerMirroredStrategy on TF 2.21 (keras-team/keras#20585). ``fit`` runs
its own loop instead and takes the role TF_CONFIG gives this task:

* no TF_CONFIG, or a MultiWorkerMirrored worker: train (every worker runs the loop);
* parameter_server ps or worker task: serve, and exit when the chief says goodbye;
* parameter_server chief: coordinate (schedule steps on the workers);
* evaluator: evaluate each new checkpoint (sidecar evaluation).

So one script, started once per task, is the whole distributed program.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from toolkit.training.between_graph import BetweenGraphRunner, NamedVariables, check_flag, check_supported
from toolkit.training.between_graph import prefix as variables_prefix
from toolkit.training.config import FitConfig, TrainingError
from toolkit.training.evaluation import Validator, WorkerValidator, run_sidecar_evaluator, write_done_marker
from toolkit.training.export import export_model, release_memory
from toolkit.training.extensions import step_factory_for
from toolkit.training.history import History
from toolkit.training.hooks import CallbackHook, CheckpointHook, LogHook, ProgressHook, SummaryHook
from toolkit.training.loop import Hook, LoopRecord, run_loop
from toolkit.training.options import (
    CheckpointConfig,
    LogConfig,
    SyncConfig,
    ValidationConfig,
    fit_config,
    group,
    moved_keywords_error,
)
from toolkit.training.preemption import install
from toolkit.training.rerun import remember_or_recall
from toolkit.training.runners import Runner, make_runner, strategy_kind
from toolkit.training.state import OptimizerSpec, TrainState, build_state
from toolkit.training.step import Forward, LossSpec, ResolvedMetric, TrainStep, make_forward, resolve_metrics

if TYPE_CHECKING:
    from strategies.sync_replicas import SyncReplicas
    from tf_config import TFConfig

__all__ = ["fit"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Run:
    """Everything one ``fit`` call decided, passed between the helpers below."""

    model_fn: Callable[[], keras.Model]
    dataset_fn: Callable[..., tf.data.Dataset]
    validation_fn: Callable[..., tf.data.Dataset] | None
    optimizer: OptimizerSpec
    forward: Forward
    metrics: dict[str, ResolvedMetric]
    config: FitConfig
    model_dir: str
    callbacks: tuple[keras.callbacks.Callback, ...]
    cfg: TFConfig
    export: bool
    verbose: int
    train_step: Callable[..., TrainStep] | None = None
    between_graph: bool = False

    @property
    def task(self) -> str:
        return "local" if self.cfg.is_local else f"{self.cfg.task_type}-{self.cfg.task_index}"


def _model_dir(model_dir: str | os.PathLike[str] | None, cfg: TFConfig) -> str:
    if model_dir is None:
        if not cfg.is_local:
            raise TrainingError(
                "`model_dir` is None but TF_CONFIG describes a cluster. Every task must see the same "
                "directory: pass model_dir='runs/my-job' (a path all tasks share).", field="model_dir")
        path = tempfile.mkdtemp(prefix="tfdist-fit-")
        logger.info("no model_dir given; using %s", path)
        return path
    if not isinstance(model_dir, (str, os.PathLike)) or not os.fspath(model_dir):
        raise TrainingError(f"`model_dir` must be a path. Received: model_dir={model_dir!r}.", field="model_dir")
    return os.fspath(model_dir)


#: ``strategy_options`` keys that belong to the serve/goodbye protocol (``strategies.run_role``)
_SERVE_OPTIONS = ("chief_start_timeout", "chief_lost_after")


def _task_config(tf_config: TFConfig | None, strategy: str | tf.distribute.Strategy,
                 options: dict[str, Any], worker_work: Callable[..., object] | None = None) -> TFConfig:
    """This task's TFConfig; in parameter-server ps/worker tasks, serve and exit here.

    Pops the serve options (``chief_start_timeout``, ``chief_lost_after``) from ``options``.
    A worker runs ``worker_work`` beside its server (``between_graph``).
    """
    from strategies import run_role
    from tf_config import TFConfig

    serve = {name: options.pop(name) for name in _SERVE_OPTIONS if name in options}
    cfg = TFConfig.from_env() if tf_config is None else tf_config
    if not isinstance(strategy, str):
        return cfg
    return run_role(cfg, strategy=strategy, worker_work=worker_work, **serve)


def _arm_preemption(tf_config: TFConfig | None, model_dir: str | os.PathLike[str] | None) -> None:
    """Installs this task's preemption handler, by role (``toolkit.training.preemption``), before it serves."""
    from strategies._roles import is_server_role
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if tf_config is None else tf_config
    role = "server" if is_server_role(cfg) else "evaluator" if cfg.is_evaluator else "train"
    task = "local" if cfg.is_local else f"{cfg.task_type}-{cfg.task_index}"
    directory = os.fspath(model_dir) if isinstance(model_dir, (str, os.PathLike)) and os.fspath(model_dir) else None
    install(role=role, model_dir=directory, task=task)


def _build_strategy(strategy: str | tf.distribute.Strategy, cfg: TFConfig,
                    options: dict[str, Any]) -> tf.distribute.Strategy:
    if isinstance(strategy, tf.distribute.Strategy):
        return strategy
    if not isinstance(strategy, str):
        raise TrainingError(
            f"`strategy` must be a name or a tf.distribute.Strategy. Received: strategy={strategy!r}. "
            "Pass 'auto' to choose from TF_CONFIG.", field="strategy")
    from strategies import make_strategy

    return make_strategy(strategy, tf_config=cfg, **options)


def _num_workers(strategy: tf.distribute.Strategy, cfg: TFConfig) -> int:
    """Input pipelines that split the data: workers under PS, all trainers under MWMS, else 1."""
    if strategy_kind(strategy) == "parameter_server":
        return len(cfg.cluster.get("worker", ()))
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return cfg.num_workers
    return 1


def _restore(state: TrainState, model_dir: str) -> int:
    """Restores the newest checkpoint in ``model_dir``, if any; returns the global step."""
    path = tf.train.latest_checkpoint(model_dir)
    if path is None:
        return 0
    status = state.checkpoint().restore(path)
    try:
        status.assert_existing_objects_matched()
    except AssertionError as exc:
        raise TrainingError(
            f"`model_dir` holds checkpoint {path} that does not match the model and optimizer built now "
            f"({str(exc).splitlines()[0]}). Use a new model_dir, or the model_fn and optimizer that wrote it.",
            field="model_dir") from exc
    logger.info("restored %s at global step %d", path, state.step)
    return state.step


def _learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The current rate, whether a schedule's tensor or a (possibly mirrored) variable."""
    value = optimizer.learning_rate
    if isinstance(value, keras.Variable):
        value = value.value
    return float(tf.convert_to_tensor(value))


def _hooks(run: _Run, state: TrainState, *, is_chief: bool, runs_loop_alone: bool) -> list[Hook]:
    config = run.config
    hooks: list[Hook] = []
    if is_chief:
        hooks.append(CheckpointHook(state.checkpoint(), run.model_dir, every=config.checkpoint_interval,
                                    keep=config.keep_checkpoints))
        hooks.append(SummaryHook(run.model_dir, every=config.summary_every_steps,
                                 learning_rate=lambda: _learning_rate(state.optimizer)))
        if run.verbose:
            hooks.append(ProgressHook(epochs=config.epochs, steps_per_epoch=config.steps_per_epoch,
                                      metric_names=list(run.metrics)))
        if run.callbacks:
            hooks.append(CallbackHook(run.callbacks, model=state.model, epochs=config.epochs,
                                      steps_per_epoch=config.steps_per_epoch))
    elif not runs_loop_alone:  # a MultiWorkerMirrored worker saves where nobody reads
        scratch = tempfile.mkdtemp(prefix=f"tfdist-{run.task}-")
        hooks.append(CheckpointHook(state.checkpoint(), scratch, every=config.checkpoint_interval, keep=1,
                                    temporary=True))
    hooks.append(LogHook(run.task, epochs=config.epochs))
    return hooks


def _sync_replicas(state: TrainState, strategy: tf.distribute.Strategy, config: FitConfig,
                   workers: int) -> SyncReplicas | None:
    """The ``SyncReplicas`` aggregator when ``sync_replicas`` is on, else None."""
    if not config.sync_replicas:
        return None
    from strategies.sync_replicas import SyncReplicas

    with strategy.scope():
        return SyncReplicas(state.optimizer, state.model.trainable_variables,
                            replicas_to_aggregate=config.replicas_to_aggregate or max(workers, 1),
                            global_step=state.global_step)


def _train_step(run: _Run, state: TrainState, strategy: tf.distribute.Strategy, workers: int) -> TrainStep:
    """The per-replica step: ``run.train_step``, else the step registered for the model (``ShardedTrainStep``
    for sharded tables, ``toolkit.training.extensions``), else ``TrainStep``."""
    factory = run.train_step or step_factory_for(state.model, TrainStep)
    with strategy.scope():
        step = factory(state, run.forward, run.metrics, global_batch_size=run.config.global_batch_size,
                       sync=_sync_replicas(state, strategy, run.config, workers))
    if not isinstance(step, TrainStep):
        raise TrainingError(
            f"`train_step` returned {type(step).__name__}; it must return a toolkit.training.TrainStep. "
            "Pass a TrainStep subclass (or a callable with its constructor's arguments).", field="train_step")
    logger.debug("train step: %s", type(step).__name__)
    return step


def _check_sync_strategy(strategy: tf.distribute.Strategy, config: FitConfig) -> None:
    kind = strategy_kind(strategy)
    if config.sync_replicas and kind != "parameter_server":
        raise TrainingError(
            f"`sync` is a SyncConfig but the strategy is {type(strategy).__name__} ({kind!r}); synchronous "
            "replicas aggregate gradients on parameter servers, so only strategy='parameter_server' (a "
            "TF_CONFIG with ps and worker jobs) accepts it. Drop sync= (mirrored strategies are "
            "already synchronous) or train with parameter servers.", field="sync")


def _train(run: _Run, strategy: tf.distribute.Strategy) -> History:
    parameter_server = strategy_kind(strategy) == "parameter_server"
    if run.between_graph and not parameter_server:
        logger.warning("between_graph=True applies to parameter servers only; %s runs its usual loop",
                       type(strategy).__name__)
        run = dataclasses.replace(run, between_graph=False)
    run = dataclasses.replace(run, config=run.config.resolved(parameter_server=parameter_server))
    cfg, config = run.cfg, run.config
    logger.debug("steps per execution: %d", config.steps_per_call)
    _check_sync_strategy(strategy, config)
    workers = _num_workers(strategy, cfg)
    named = NamedVariables(variables_prefix()) if run.between_graph else None
    # outside the strategy's scope, so that its creator picks the ps first
    with tf.variable_creator_scope(named) if named is not None else contextlib.nullcontext():
        state = build_state(strategy, run.model_fn, run.optimizer)
    step = _train_step(run, state, strategy, workers)  # may add checkpointed state (before the restore)
    start = _restore(state, run.model_dir)
    state.model.stop_training = False
    # A parameter-server coordinator that waits too often leaves workers idle: keep every worker busy
    # for a few executions between waits unless the user asked for a log interval.
    sync_every = config.log_every_steps or max(config.log_interval, 4 * workers * config.steps_per_call)
    runner: Runner
    if named is not None:
        kind = check_supported(state, step, sync=config.sync_replicas,
                                             custom_step=run.train_step is not None)
        runner = BetweenGraphRunner(strategy, step, state.global_step, state=state, named=named,
                                                  kind=kind, skip_steps=start, num_workers=workers,
                                                  sync_every=sync_every)
    else:
        runner = make_runner(strategy, step, state.global_step, dataset_fn=run.dataset_fn, skip_steps=start,
                             num_workers=workers, sync_every=sync_every)
    is_chief = cfg.is_chief or cfg.is_local
    validate: Validator | None = None
    if run.validation_fn is not None and is_chief:
        coordinator = getattr(runner, "coordinator", None)
        if coordinator is not None:  # parameter servers: the workers evaluate; the chief only adds up
            validate = WorkerValidator(state.model, run.validation_fn, forward=run.forward, metrics=run.metrics,
                                       steps=config.validation_steps, coordinator=coordinator,
                                       shards=workers)
        else:
            validate = Validator(state.model, run.validation_fn, forward=run.forward, metrics=run.metrics,
                                 steps=config.validation_steps)
    hooks = _hooks(run, state, is_chief=is_chief, runs_loop_alone=runner.single_controller)
    record = run_loop(runner, config=config, layout=step.layout, start_step=start, hooks=hooks,
                      validate=validate, stop_requested=lambda: is_chief and bool(state.model.stop_training))
    record = remember_or_recall(record, model_dir=run.model_dir, start_step=start, config=config,
                                is_chief=is_chief, validate=validate)  # a re-run on a finished model_dir
    runner.close()
    stats = runner.sync_stats()
    exports: dict[str, str] = {}
    if is_chief:
        if run.export:
            # Training's traced functions, iterators and validation are done with: let them go before the
            # export traces the model again, so the chief's peak is not both at once.
            del runner, validate, hooks
            release_memory()
            exports = export_model(state.model, run.model_fn, os.path.join(run.model_dir, "export"))
        write_done_marker(run.model_dir, record.final_step)
    if stats:
        logger.info("synchronous updates: %s", " ".join(f"{k}={v}" for k, v in stats.items()))
    return _history(record, run, model=state.model, exports=exports, role="chief" if is_chief else cfg.task_type,
                    sync_stats=stats)


def _history(record: LoopRecord, run: _Run, *, model: keras.Model | None, exports: dict[str, str], role: str,
             sync_stats: dict[str, int] | None = None) -> History:
    return History(history=record.history, epoch=record.epochs, rates=record.rates, model=model,
                   global_step=record.final_step, model_dir=run.model_dir, exports=exports, role=role,
                   stopped_early=record.stopped_early, sync_stats=dict(sync_stats or {}))


def _evaluate(run: _Run, timeout: float) -> History:
    if run.validation_fn is None:
        raise TrainingError(
            "This task is the evaluator (TF_CONFIG task type 'evaluator') but `validation_fn` is None. "
            "Pass validation_fn=<dataset_fn of the evaluation data>.", field="validation_fn")
    record = run_sidecar_evaluator(run.model_fn, run.validation_fn, forward=run.forward, metrics=run.metrics,
                                   model_dir=run.model_dir, final_step=run.config.total_steps,
                                   steps=run.config.validation_steps, timeout=timeout)
    return _history(record, run, model=None, exports={}, role="evaluator")


def fit(
    model_fn: Callable[[], keras.Model],
    dataset_fn: Callable[..., tf.data.Dataset],
    *,
    loss: LossSpec | None = None,
    optimizer: OptimizerSpec = "adam",
    metrics: Sequence[object] = (),  # names, functions, SummedMetrics, MeanMetricWrappers
    epochs: int = 1,
    steps_per_epoch: int,
    steps_per_execution: int | None = None,
    validation_fn: Callable[..., tf.data.Dataset] | None = None,
    model_dir: str | os.PathLike | None = None,
    global_batch_size: int | None = None,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    strategy: str | tf.distribute.Strategy = "auto",
    strategy_options: dict[str, Any] | None = None,
    tf_config: TFConfig | None = None,
    forward: Forward | None = None,
    export: bool = True,
    verbose: int = 1,
    train_step: Callable[..., TrainStep] | None = None,
    checkpoint: CheckpointConfig | None = None,
    logs: LogConfig | None = None,
    validation: ValidationConfig | None = None,
    sync: SyncConfig | None = None,
    between_graph: bool = False,
    **moved: object,
) -> History:
    """Trains ``model_fn()`` on ``dataset_fn`` under the strategy TF_CONFIG calls for.

    Call it in every task of the job with the same arguments; see the module
    docstring for what each task does.

    Example:
        >>> import tempfile
        >>> from toolkit import data, fit
        >>> from models import digits_mlp
        >>> train = data.load("digits")
        >>> history = fit(digits_mlp, train.dataset_fn(64), epochs=3, steps_per_epoch=train.steps_per_epoch(64),
        ...               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...               metrics=["accuracy"], model_dir=tempfile.mkdtemp(), export=False, verbose=0)
        >>> history.epoch, history.history["loss"][-1] < history.history["loss"][0]
        ([0, 1, 2], True)

    Args:
        model_fn: builds the Keras 3 model; called under the strategy's scope.
        dataset_fn: ``dataset_fn(input_context)`` returns this input pipeline's
            dataset of ``(features, labels)`` batches of
            ``input_context.get_per_replica_batch_size(global_batch)``,
            repeated; ``toolkit.data`` builds correctly sharded ones.
        loss: a Keras loss (its reduction is switched off), name or function
            returning per-example losses. Not needed when ``forward`` is given.
        optimizer: name, Keras optimizer (re-created under the scope from its
            config) or a callable returning one. Schedules follow the global step.
        metrics: names or per-example functions (means of per-example values).
        epochs, steps_per_epoch, steps_per_execution, global_batch_size: see
            ``FitConfig``.
        validation_fn: a dataset_fn of finite validation batches, evaluated by
            the chief at each epoch end and by an evaluator task
            (``validation=ValidationConfig(steps=..., evaluator_timeout=...)``).
        model_dir: checkpoints, summaries and exports (the chief writes here;
            others only read). Resumes from its newest checkpoint.
        callbacks: Keras callbacks, run on the chief.
        strategy: ``auto``, a strategy name, or a tf.distribute.Strategy.
        strategy_options: keyword arguments of ``strategies.make_strategy``,
            plus the serve timeouts of ``strategies.run_role``
            (``chief_start_timeout``, ``chief_lost_after``; see
            ``strategies.ServeOptions``) for parameter-server ps/worker tasks.
        tf_config: this task's ``TFConfig`` (None reads TF_CONFIG).
        forward: ``(model, features, labels, training) -> (per_example_loss,
            predictions)``, replacing ``loss`` for custom objectives.
        export: write ``model.keras`` and a SavedModel to ``model_dir/export``.
        verbose: 1 shows a progress bar on the chief, 0 only logs.
        train_step: the per-replica step, the engine's seam: a ``TrainStep``
            subclass or a callable ``(state, forward, metrics, *,
            global_batch_size, sync) -> TrainStep``, called under the
            strategy's scope. None: ``TrainStep``, or
            ``toolkit.layers.ShardedTrainStep`` (with ``SparseAdam()``) when the
            model has a ``ShardedEmbedding``; pass
            ``functools.partial(ShardedTrainStep, sparse_optimizer=...)`` to
            choose the table optimizer.
        checkpoint: a ``CheckpointConfig`` (how often, how many kept); default:
            each epoch's end, keep 3.
        logs: a ``LogConfig`` (progress-log and TensorBoard intervals).
        validation: a ``ValidationConfig`` (validation batches, the evaluator's
            patience).
        sync: a ``SyncConfig`` turns on synchronous parameter-server updates
            (``replicas_to_aggregate`` contributions per update); async stays
            the default.
        between_graph: under parameter servers, each worker runs its own
            graph-mode step loop on the ps variables, one ``session.run`` per
            step (TF1's between-graph replication), instead of the chief
            scheduling closures; the chief keeps every other duty. Faster at
            one step per call; Adam and SGD only, one step per execution
            (``toolkit.training.between_graph``).

    Returns:
        A ``History``. Parameter-server ps and worker tasks never return: they
        exit when the chief finishes.

    Raises:
        TrainingError: a bad argument (names the argument and the fix), e.g.
            ``sync`` under a strategy other than parameter_server.
        TypeError: a keyword ``fit`` does not take; one that moved into a
            group (``checkpoint_every_steps``, ...) names its new home.
        tf_config.TFConfigError: TF_CONFIG cannot run the chosen strategy.
    """
    if moved:
        raise moved_keywords_error(moved)
    config = fit_config(epochs=epochs, steps_per_epoch=steps_per_epoch, steps_per_execution=steps_per_execution,
                         global_batch_size=global_batch_size, checkpoint=group(checkpoint, CheckpointConfig),
                         logs=group(logs, LogConfig), validation=group(validation, ValidationConfig), sync=sync)
    evaluator_timeout = group(validation, ValidationConfig).evaluator_timeout
    if forward is None and loss is None:
        raise TrainingError("`loss` is None and no `forward` was given. Pass e.g. "
                            "loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True).", field="loss")
    options = dict(strategy_options or {})
    forward = forward or make_forward(loss)
    resolved = resolve_metrics(metrics)
    work = None
    if check_flag(between_graph, steps_per_execution):
        from toolkit.training.between_graph_worker import worker_loop

        config = dataclasses.replace(config, steps_per_execution=1)
        work = worker_loop(model_fn, dataset_fn, forward=forward, metrics=resolved,
                           global_batch_size=global_batch_size, tf_config=tf_config)
    _arm_preemption(tf_config, model_dir)
    cfg = _task_config(tf_config, strategy, options, worker_work=work)
    run = _Run(model_fn=model_fn, dataset_fn=dataset_fn, validation_fn=validation_fn, optimizer=optimizer,
               forward=forward, metrics=resolved, config=config,
               model_dir=_model_dir(model_dir, cfg), callbacks=tuple(callbacks), cfg=cfg, export=export,
               verbose=int(verbose), train_step=train_step, between_graph=work is not None)
    if cfg.is_evaluator:
        return _evaluate(run, evaluator_timeout)
    return _train(run, _build_strategy(strategy, cfg, options))
