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
from typing import TYPE_CHECKING

import keras
import tensorflow as tf

from toolkit.training import engine
from toolkit.training.between_graph import NamedVariables, runner_for
from toolkit.training.between_graph import prefix as variables_prefix
from toolkit.training.compiled import read_compiled
from toolkit.training.config import TrainingError
from toolkit.training.engine import EngineRun, task_of
from toolkit.training.evaluation import run_sidecar_evaluator, write_done_marker
from toolkit.training.export import export_model, release_memory
from toolkit.training.history import History
from toolkit.training.loop import LoopRecord
from toolkit.training.options import FitConfig, FitOptions
from toolkit.training.preemption import install
from toolkit.training.runners import strategy_kind
from toolkit.training.state import build_state

if TYPE_CHECKING:
    from strategies import ServeOptions, StrategyOptions
    from tf_config import TFConfig

__all__ = ["fit"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Run:
    """Everything one ``fit`` call decided, passed between the helpers below."""

    model_fn: Callable[[], keras.Model]
    dataset_fn: Callable[..., tf.data.Dataset]
    validation_fn: Callable[..., tf.data.Dataset] | None
    config: FitConfig
    options: FitOptions
    model_dir: str
    callbacks: tuple[keras.callbacks.Callback, ...]
    cfg: TFConfig
    verbose: int
    between_graph: bool | None = False  # None: under parameter servers when the workers run fit and the step allows


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


def _arm_preemption(cfg: TFConfig, options: ServeOptions | None) -> None:
    """Installs this task's preemption handler, by role (``toolkit.training.preemption``), before it serves."""
    from strategies._roles import is_server_role

    role = "server" if is_server_role(cfg) else "evaluator" if cfg.is_evaluator else "train"
    install(options, role=role, task="local" if cfg.is_local else f"{cfg.task_type}-{cfg.task_index}")


def _build_strategy(strategy: str | tf.distribute.Strategy, cfg: TFConfig,
                    options: StrategyOptions | None) -> tf.distribute.Strategy:
    if isinstance(strategy, tf.distribute.Strategy):
        return strategy
    if not isinstance(strategy, str):
        raise TrainingError(
            f"`strategy` must be a name or a tf.distribute.Strategy. Received: strategy={strategy!r}. "
            "Pass 'auto' to choose from TF_CONFIG.", field="strategy")
    from strategies import make_strategy

    given = {} if options is None else {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    return make_strategy(strategy, tf_config=cfg, **given)


def _check_sync_strategy(strategy: tf.distribute.Strategy, config: FitConfig) -> None:
    kind = strategy_kind(strategy)
    if config.sync is not None and kind != "parameter_server":
        raise TrainingError(
            f"`FitOptions.sync` is a SyncConfig but the strategy is {type(strategy).__name__} ({kind!r}); synchronous "
            "replicas aggregate gradients on parameter servers, so only strategy='parameter_server' (a "
            "TF_CONFIG with ps and worker jobs) accepts it. Drop FitOptions.sync (mirrored strategies "
            "are already synchronous) or train with parameter servers.", field="FitOptions.sync")


def _train(run: _Run, strategy: tf.distribute.Strategy) -> History:
    task = task_of(strategy, run.cfg)
    parameter_server = task.kind == "parameter_server"
    if run.between_graph and not parameter_server:  # True: asked for
        logger.warning("between_graph=True applies to parameter servers only; %s runs its usual loop",
                       type(strategy).__name__)
        run = dataclasses.replace(run, between_graph=False)
    _check_sync_strategy(strategy, run.config)
    named = NamedVariables(variables_prefix()) if parameter_server and run.between_graph is not False else None
    # outside the strategy's scope, so that its creator picks the ps first
    with tf.variable_creator_scope(named) if named is not None else contextlib.nullcontext():
        state = build_state(strategy, run.model_fn)
    learn = read_compiled(state.model, strategy, forward=run.options.forward)
    forward = learn.forward()
    config = dataclasses.replace(run.config, steps_per_execution=learn.steps_per_execution)
    # may add checkpointed state (before the restore), named too: between-graph workers open it (sparse slots)
    with tf.variable_creator_scope(named) if named is not None else contextlib.nullcontext():
        step = engine.build_step(state, strategy, forward, learn.metrics, config=config, workers=task.workers,
                                 factory=run.options.train_step)
    runner = None
    if named is not None:
        runner = runner_for(state, step, named, workers=task.workers, required=bool(run.between_graph),
                            steps_per_execution=config.steps_per_execution)
    engine_run = EngineRun(config=config, task=task, dataset_fn=run.dataset_fn, forward=forward,
                           metrics=learn.metrics, checkpoint_dir=run.model_dir, summary_dir=run.model_dir,
                           callbacks=run.callbacks if task.is_chief else (), verbose=run.verbose,
                           validation_data=run.validation_fn if task.is_chief else None, workers_validate=True,
                           keep_final_metrics=True)
    result = engine.train(engine_run, state, step, strategy, runner=runner)
    exports: dict[str, str] = {}
    if task.is_chief:
        if run.options.export:
            release_memory()  # training's traced functions and iterators are gone before the export traces again
            exports = export_model(state.model, run.model_fn, os.path.join(run.model_dir, "export"))
        write_done_marker(run.model_dir, result.record.final_step)
    return _history(result.record, run, model=state.model, exports=exports,
                    role="chief" if task.is_chief else run.cfg.task_type, sync_stats=result.sync_stats)


def _history(record: LoopRecord, run: _Run, *, model: keras.Model | None, exports: dict[str, str], role: str,
             sync_stats: dict[str, int] | None = None) -> History:
    return History(history=record.history, epoch=record.epochs, rates=record.rates, model=model,
                   global_step=record.final_step, model_dir=run.model_dir, exports=exports, role=role,
                   stopped_early=record.stopped_early, sync_stats=dict(sync_stats or {}))


def _evaluate(run: _Run) -> History:
    if run.validation_fn is None:
        raise TrainingError(
            "This task is the evaluator (TF_CONFIG task type 'evaluator') but `validation_fn` is None. "
            "Pass validation_fn=<dataset_fn of the evaluation data>.", field="validation_fn")
    record = run_sidecar_evaluator(run.model_fn, run.validation_fn, forward=run.options.forward,
                                   model_dir=run.model_dir, final_step=run.config.total_steps,
                                   steps=run.config.validation.steps,
                                   timeout=run.config.validation.evaluator_timeout)
    return _history(record, run, model=None, exports={}, role="evaluator")


def fit(
    model_fn: Callable[[], keras.Model],
    dataset_fn: Callable[..., tf.data.Dataset],
    *,
    epochs: int = 1,
    steps_per_epoch: int,
    validation_fn: Callable[..., tf.data.Dataset] | None = None,
    model_dir: str | os.PathLike | None = None,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    strategy: str | tf.distribute.Strategy = "auto",
    verbose: int = 1,
    options: FitOptions | None = None,
) -> History:
    """Trains ``model_fn()`` on ``dataset_fn`` under the strategy TF_CONFIG calls for.

    Call it in every task of the job with the same arguments; see the module
    docstring for what each task does. ``model_fn`` compiles the model it
    builds, as for Keras' ``model.fit``: the loss, optimizer, metrics and
    ``steps_per_execution`` are the ones given to ``model.compile``.

    Example:
        >>> import tempfile
        >>> from toolkit import data, fit
        >>> from toolkit.training import FitOptions
        >>> from models import digits_mlp
        >>> def model_fn():
        ...     model = digits_mlp()
        ...     model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...                   metrics=["accuracy"])
        ...     return model
        >>> train = data.load("digits")
        >>> history = fit(model_fn, train.dataset_fn(64), epochs=3, steps_per_epoch=train.steps_per_epoch(64),
        ...               model_dir=tempfile.mkdtemp(), verbose=0, options=FitOptions(export=False))
        >>> history.epoch, history.history["loss"][-1] < history.history["loss"][0]
        ([0, 1, 2], True)

    Args:
        model_fn: builds and compiles the Keras 3 model; called under the
            strategy's scope. From ``model.compile`` the engine takes
            ``optimizer`` (re-created under the scope from its config;
            schedules follow the global step), ``loss`` (a Keras loss, name or
            function returning per-example losses; not needed when
            ``options.forward`` is given), ``metrics`` (what Keras'
            ``model.fit`` takes here, translated by the same code
            (``toolkit.training.compiled``), and ``SummedMetric``\ s),
            ``steps_per_execution`` and ``jit_compile``.
        dataset_fn: ``dataset_fn(input_context)`` returns this input pipeline's
            dataset of ``(features, labels)`` batches of
            ``input_context.get_per_replica_batch_size(global_batch)``,
            repeated; ``toolkit.data`` builds correctly sharded ones.
        epochs, steps_per_epoch: see ``FitConfig``.
        validation_fn: a dataset_fn of finite validation batches, evaluated by
            the chief at each epoch end and by an evaluator task
            (``options.validation``).
        model_dir: checkpoints, summaries and exports (the chief writes here;
            others only read). Resumes from its newest checkpoint.
        callbacks: Keras callbacks, run on the chief.
        strategy: ``auto``, a strategy name, or a tf.distribute.Strategy.
        verbose: 1 shows a progress bar on the chief, 0 only logs.
        options: a ``FitOptions``: checkpoints, logs, validation, synchronous
            updates, the step (``forward``, ``train_step``,
            ``global_batch_size``, ``between_graph``), export, and the
            strategy's and servers' typed options.

    Returns:
        A ``History``. Parameter-server ps and worker tasks never return: they
        exit when the chief finishes.

    Raises:
        TrainingError: a bad argument (names the argument and the fix), e.g.
            ``options.sync`` under a strategy other than parameter_server.
        tf_config.TFConfigError: TF_CONFIG cannot run the chosen strategy.
    """
    if options is None:
        options = FitOptions()
    elif not isinstance(options, FitOptions):
        raise TrainingError(f"`options` must be a toolkit.training.FitOptions or None. Received: options={options!r}. "
                            "Pass e.g. options=FitOptions(checkpoint=CheckpointConfig(every=500)).", field="options")
    config = options.run_config(epochs=epochs, steps_per_epoch=steps_per_epoch)
    work = None
    if options.between_graph is not False and isinstance(strategy, str):
        from toolkit.training.between_graph_worker import worker_loop

        work = worker_loop(model_fn, dataset_fn, forward=options.forward, global_batch_size=config.global_batch_size,
                           tf_config=options.tf_config)
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if options.tf_config is None else options.tf_config
    _arm_preemption(cfg, options.serve)
    if isinstance(strategy, str):  # ps and worker tasks serve here, and exit when the chief says goodbye
        from strategies import run_role

        cfg = run_role(cfg, strategy=strategy, options=options.serve, worker_work=work)
    run = _Run(model_fn=model_fn, dataset_fn=dataset_fn, validation_fn=validation_fn, config=config, options=options,
               model_dir=_model_dir(model_dir, cfg), callbacks=tuple(callbacks), cfg=cfg,
               verbose=int(verbose), between_graph=options.between_graph if work is not None else False)
    if cfg.is_evaluator:
        return _evaluate(run)
    return _train(run, _build_strategy(strategy, cfg, options.strategy))
