"""``Estimator``: ``tf.estimator.Estimator``'s graph-mode engine on TF 2.21.

Each call builds a fresh ``tf.Graph`` (never touching the process's eager
mode, so Keras 3 code in the same process keeps working), calls ``input_fn``
and ``model_fn`` inside it, and runs a monitored session with TF1's global
step, ``Scaffold``, hooks and ``Saver`` checkpoints. On a TF_CONFIG cluster
each task is its own client (between-graph replication): variables go to the
ps tasks through ``replica_device_setter``; see ``toolkit.estimator._session``.

Example:
    >>> est = Estimator(model_fn, model_dir="runs/iris", params={"hidden_units": [10, 10]})  # doctest: +SKIP
    >>> est.train(train_input_fn, max_steps=500)  # doctest: +SKIP
    >>> est.evaluate(eval_input_fn)["accuracy"]  # doctest: +SKIP
"""
from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf

from strategies import _native as native
from strategies.between_graph import STOP_GRACE_SECS
from toolkit._compat.tensorflow import colocated_global_step_read
from toolkit._graph_packing import pack_transfers
from toolkit.estimator import _session
from toolkit.estimator._args import check_hooks as _hooks
from toolkit.estimator._args import check_listeners as _listeners
from toolkit.estimator._args import check_positive as _positive
from toolkit.estimator._args import receiver as _receiver
from toolkit.estimator._args import restore_error as _restore_error
from toolkit.estimator._construct import (
    EstimatorError,
    EstimatorTypeError,
    check_not_overridden,
    resolve_config,
    verify_model_fn_args,
)
from toolkit.estimator._graph import call_input_fn, call_model_fn
from toolkit.estimator._preemption import PreemptionHook, raise_if_preempted
from toolkit.estimator._strategy_kinds import strategy_of, strategy_trains
from toolkit.estimator._warm_start import WarmStartSettings, export_fallback, warm_start_if_new
from toolkit.estimator.run_config import RunConfig
from toolkit.estimator.spec import EstimatorSpec, ModeKeys

__all__ = ["Estimator", "EstimatorError", "EstimatorTypeError", "EstimatorV1", "WarmStartSettings"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1



class Estimator:
    """Trains, evaluates, predicts with and exports a TF1-style ``model_fn``.

    Args:
        model_fn: ``model_fn(features, labels, mode, params, config)`` (any
            subset of those names) returning an ``EstimatorSpec``.
        model_dir: overrides ``config.model_dir``.
        config: a ``RunConfig`` (None: ``RunConfig()``, which reads TF_CONFIG).
        params: a dict passed to model_fn (a deep copy).
        warm_start_from: a checkpoint path/directory or ``WarmStartSettings``.
    """

    def __init__(self, model_fn: Callable[..., Any], model_dir: str | os.PathLike | None = None,
                 config: RunConfig | None = None, params: Mapping[str, Any] | None = None,
                 warm_start_from: Any = None) -> None:
        check_not_overridden(Estimator, self)
        config = resolve_config(config, model_dir, RunConfig)
        verify_model_fn_args(model_fn, params)
        if params is not None and not isinstance(params, Mapping):
            raise EstimatorError(f"`params` is {type(params).__name__}; expected a dict.", field="params")
        if isinstance(warm_start_from, (str, os.PathLike)):
            warm_start_from = WarmStartSettings(os.fspath(warm_start_from))
        if warm_start_from is not None and not isinstance(warm_start_from, WarmStartSettings):
            raise EstimatorError(f"`warm_start_from` is {warm_start_from!r}; expected a "
                                 "checkpoint path or WarmStartSettings.", field="warm_start_from")
        self._model_fn, self._params, self._config = model_fn, copy.deepcopy(dict(params or {})), config
        self._warm_start = warm_start_from
        self.last_local_steps = 0  # steps this task ran in its last train() call (between-graph: its own share)

    #: Between-graph training sends what one task passes another in a step as one packed
    #: tensor (``toolkit._graph_packing``); False keeps TensorFlow's one RPC per tensor.
    pack_transfers = True

    @property
    def model_fn(self) -> Callable[..., EstimatorSpec]:
        """``model_fn(features, labels, mode, config)`` with this Estimator's params bound, as TF gave it."""

        def public_model_fn(features: Any, labels: Any, mode: str, config: Any) -> EstimatorSpec:
            return self._call_model_fn(features, labels, mode, config)

        return public_model_fn

    def eval_dir(self, name: str | None = None) -> str:
        """Where ``evaluate(name=name)`` writes its summaries: ``model_dir/eval`` or ``model_dir/eval_<name>``."""
        return os.path.join(self.model_dir, f"eval_{name}" if name else "eval")

    params = property(lambda self: copy.deepcopy(self._params))
    config = property(lambda self: self._config)
    model_dir = property(lambda self: self._config.model_dir)

    # ---- graph building ---------------------------------------------------------
    def _call_model_fn(self, features: Any, labels: Any, mode: str, config: Any) -> EstimatorSpec:
        return call_model_fn(self._model_fn, features, labels, mode, params=copy.deepcopy(self._params),
                             config=config)

    def _call(self, features: Any, labels: Any, mode: str) -> EstimatorSpec:
        return self._call_model_fn(features, labels, mode, self._config)

    def _inputs(self, input_fn: Callable[..., Any], mode: str) -> tuple[Any, Any]:
        context = None
        if mode == ModeKeys.TRAIN and self._config.num_worker_replicas > 1:
            context = tf.distribute.InputContext(num_input_pipelines=self._config.num_worker_replicas,
                                                 input_pipeline_id=self._config.worker_index)
        return call_input_fn(input_fn, mode, params=copy.deepcopy(self._params), config=self._config,
                             input_context=context)

    def _new_graph(self) -> tf.Graph:
        from toolkit.estimator._keras3_optimizers import mark_estimator_graph

        graph = mark_estimator_graph(tf.Graph())
        if self._config.tf_random_seed is not None:
            graph.seed = self._config.tf_random_seed
        return graph

    def _saver_scaffold(self, spec: EstimatorSpec) -> Any:
        scaffold = spec.scaffold or v1.train.Scaffold()
        if scaffold.saver is None and not v1.get_collection(v1.GraphKeys.SAVERS):
            saver = v1.train.Saver(sharded=True, max_to_keep=self._config.keep_checkpoint_max,
                                   keep_checkpoint_every_n_hours=self._config.keep_checkpoint_every_n_hours,
                                   defer_build=True, save_relative_paths=True)
            v1.add_to_collection(v1.GraphKeys.SAVERS, saver)
        return scaffold

    def _local_session_config(self) -> Any:
        """Evaluation and prediction run in this process: the user's session_config, else soft placement."""
        if strategy_of(self._config, "eval_distribute")[1]:
            from toolkit.estimator._distributed import eval_session_config

            return eval_session_config(self._config)
        if getattr(self._config, "_session_config_derived", False):  # TF's cluster default filters remote devices
            return v1.ConfigProto(allow_soft_placement=True)
        return self._config.session_config or v1.ConfigProto(allow_soft_placement=True)

    # ---- checkpoints ------------------------------------------------------------
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in ``model_dir``, or None."""
        return tf.train.latest_checkpoint(self.model_dir)

    def _checkpoint(self, checkpoint_path: str | None, what: str) -> str:
        path = self._checkpoint_or_none(checkpoint_path, what, fresh=False)
        assert path is not None
        return path

    def _checkpoint_or_none(self, checkpoint_path: str | None, what: str, *, fresh: bool = True) -> str | None:
        """The checkpoint to restore; None (fresh variables, with a warning, as TF did) when there is none."""
        if checkpoint_path is not None:
            path: str | None = os.fspath(checkpoint_path)
            if os.path.isdir(str(path)):
                found = tf.train.latest_checkpoint(path)
                if found is None:
                    raise EstimatorError(f"Couldn't find trained model at {path}: `checkpoint_path` is a "
                                         "directory without checkpoints. Point it at a checkpoint (or its "
                                         "directory) written by train().", field="checkpoint_path")
                path = found
            return path
        path = self.latest_checkpoint()
        if path is None and not fresh:
            raise EstimatorError(f"Could not find trained model in model_dir: {self.model_dir}. {what} needs a "
                                 "trained model: call train() first, or pass checkpoint_path=.", field="model_dir")
        if path is None:
            logger.warning("Could not find trained model in model_dir: %s, running initialization to %s.",
                           self.model_dir, what)
        return path

    def get_variable_names(self) -> list[str]:
        return [name for name, _ in tf.train.list_variables(self._checkpoint(None, "get_variable_names()"))]

    def get_variable_value(self, name: str) -> Any:
        return tf.train.load_variable(self._checkpoint(None, "get_variable_value()"), name)

    def _global_step_now(self) -> int:
        path = self.latest_checkpoint()
        return int(tf.train.load_variable(path, v1.GraphKeys.GLOBAL_STEP)) if path else 0

    # ---- train ------------------------------------------------------------------
    def train(self, input_fn: Callable[..., Any], hooks: Sequence[Any] | None = None, steps: int | None = None,
              max_steps: int | None = None, saving_listeners: Sequence[Any] | None = None) -> Estimator:
        """Trains until ``max_steps`` (global), for ``steps`` more steps, or until the input ends.

        On a TF_CONFIG cluster a ps task serves here and exits when the chief
        says goodbye; the chief and the workers each train their own graph.
        """
        from toolkit.estimator._roles import serve_if_ps

        serve_if_ps(self._config)
        if self._config.is_evaluator or self._config.task_type == "evaluator":
            raise EstimatorError("Train has been called wrong configuration: train() was called in the "
                                 "evaluator task, which only evaluates. Please use train_and_evaluate(), which "
                                 "does the right thing in every task.", field="config")
        if steps is not None and max_steps is not None:
            raise EstimatorError(f"Can not provide both steps and max_steps: train() got steps={steps} and "
                                 f"max_steps={max_steps}; pass at most one.", field="steps")
        steps = _positive("steps", steps)
        max_steps = _positive("max_steps", max_steps)
        hooks = _hooks("hooks", hooks)
        saving_listeners = _listeners(saving_listeners)
        if saving_listeners and self._config.is_chief and not any(self._config.checkpoint_every.values()):
            raise EstimatorError("There should be a CheckpointSaverHook to use saving_listeners: this RunConfig "
                                 "saves no checkpoints (save_checkpoints_steps and save_checkpoints_secs are "
                                 "None). Set one of them.", field="saving_listeners")
        distributed = not self._config.is_local and self._config.num_ps_replicas > 0
        if max_steps is not None and self._global_step_now() >= max_steps:
            logger.info("skipping training: the checkpoint is already at max_steps=%d", max_steps)
            if distributed and not self._config.is_chief:
                _session.worker_done(self._config)  # the chief need not wait for this worker (say, a late one)
            return self
        if strategy_trains(self._config):
            from toolkit.estimator._distributed import train_distributed

            train_distributed(self, input_fn, hooks, steps, max_steps, saving_listeners)
            return self
        target = _session.server_target(self._config)
        if not self._config.is_local and not distributed:
            logger.warning("TF_CONFIG has no ps tasks: between-graph replication keeps the shared variables on "
                           "the ps, so each task trains its own copy, as in TF1. Add a ps job to share them.")
        # the chief of a cluster with ps hears of a preempted ps, and says goodbye to them with 143
        chief_of_ps = _session.training_cluster(self._config) if distributed and self._config.is_chief else None
        if chief_of_ps is not None:
            _session.chief_starts(self._config)
        native_tasks = _session.native_tasks(self._config, target) if distributed else []
        with self._new_graph().as_default():
            with native.kernels_on(native_tasks):
                spec, stop = self._train_graph(input_fn, steps, max_steps)
            if distributed and self.pack_transfers:
                saved = pack_transfers(v1.get_default_graph(), [spec.train_op, spec.loss])
                logger.info("%s-%d: %d fewer transfers per step (packed)", self._config.task_type,
                            self._config.task_id, saved)
            # TF's order: the caller's hooks, the stop, model_fn's hooks, then the NaN check
            preemption = PreemptionHook(chief_of_ps)
            all_hooks = [preemption, *hooks, stop, *spec.training_hooks, v1.train.NanTensorHook(spec.loss),
                         *_session.release_sync_workers(spec, self._config)]
            self._run_training(spec, all_hooks, saving_listeners, target)
        raise_if_preempted(self._config.model_dir, f"{self._config.task_type}-{self._config.task_id}", chief_of_ps)
        if distributed and self._config.is_chief:
            _session.arm_goodbye(self._config)
        elif distributed:
            _session.worker_done(self._config)
        return self

    def _train_graph(self, input_fn: Callable[..., Any], steps: int | None, max_steps: int | None) -> tuple[Any, Any]:
        config = self._config
        setter = _session.replica_setter(config)
        with v1.device(setter):
            v1.train.get_or_create_global_step()
        colocated_global_step_read(v1.get_default_graph())  # the step hooks' per-step read
        job, index = _session.job_and_task(config)
        worker_cpu = None if config.is_local else f"/job:{job}/task:{index}/device:CPU:0"
        with tf.device(worker_cpu):
            features, labels = self._inputs(input_fn, ModeKeys.TRAIN)
        with v1.device(setter):
            spec = self._call(features, labels, ModeKeys.TRAIN)
        self._warm_start_if_new()
        v1.summary.scalar("loss", spec.loss)
        stop = v1.train.StopAtStepHook(num_steps=steps, last_step=max_steps) if (steps or max_steps) else \
            v1.train.StopAtStepHook(last_step=2**62)
        return spec, stop

    def _warm_start_if_new(self) -> None:
        warm_start_if_new(self._warm_start, self.model_dir)

    def _run_training(self, spec: EstimatorSpec, hooks: list[Any], listeners: list[Any], target: str,
                      session_config: Any = None) -> None:
        config = self._config
        scaffold = self._saver_scaffold(spec)
        proto = session_config or _session.session_config(config)
        if config.is_chief:
            every = config.checkpoint_every
            chief_hooks = list(spec.training_chief_hooks or ())
            if listeners:
                chief_hooks.append(v1.train.CheckpointSaverHook(
                    config.model_dir, save_secs=every["save_checkpoints_secs"],
                    save_steps=every["save_checkpoints_steps"], scaffold=scaffold, listeners=listeners))
                every = {"save_checkpoints_steps": None, "save_checkpoints_secs": None}
            hooks.append(v1.train.LoggingTensorHook({"loss": spec.loss, "step": v1.train.get_global_step()},
                                                    every_n_iter=max(1, config.log_step_count_steps or 100)))
            session = v1.train.MonitoredTrainingSession(
                master=target, is_chief=True, checkpoint_dir=config.model_dir, scaffold=scaffold, hooks=hooks,
                chief_only_hooks=chief_hooks, save_checkpoint_secs=every["save_checkpoints_secs"],
                save_checkpoint_steps=every["save_checkpoints_steps"],
                save_summaries_steps=config.save_summary_steps or None, config=proto,
                log_step_count_steps=config.log_step_count_steps or None,
                max_wait_secs=config.session_creation_timeout_secs, stop_grace_period_secs=STOP_GRACE_SECS)
        else:
            creator = _session.FastWorkerSessionCreator(scaffold, target, proto, config.session_creation_timeout_secs)
            session = v1.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                                stop_grace_period_secs=STOP_GRACE_SECS)
        steps = 0
        with session:
            while not session.should_stop():
                session.run(spec.train_op)
                steps += 1
        logger.info("%s-%d: %d local steps", config.task_type, config.task_id, steps)
        self.last_local_steps = steps

    # ---- evaluate, predict -----------------------------------------------------
    def evaluate(self, input_fn: Callable[..., Any], steps: int | None = None, hooks: Sequence[Any] | None = None,
                 checkpoint_path: str | None = None, name: str | None = None) -> dict[str, Any]:
        """Evaluates a checkpoint (default: the newest) on ``input_fn``'s batches.

        Returns:
            ``{"loss": ..., <each eval_metric_ops value>..., "global_step": ...}``.
        """
        from toolkit.estimator._evaluate import run_evaluation, write_eval_summary
        from toolkit.estimator._spec_base import check_eval_name

        steps = _positive("steps", steps)
        hooks = _hooks("hooks", hooks)
        check_eval_name(name, EstimatorError)
        path = self._checkpoint_or_none(checkpoint_path, "evaluate")
        with self._new_graph().as_default():
            spec, all_hooks = self._evaluate_build_graph(input_fn, hooks)
            metrics = run_evaluation(spec, self._saver_scaffold(spec), path, steps=steps, hooks=all_hooks,
                                     master=self._config.evaluation_master,
                                     error=_restore_error, config=self._local_session_config())
        write_eval_summary(self.eval_dir(name), metrics, checkpoint_path=path)
        logger.info("evaluation at step %d: %s", metrics["global_step"],
                    " ".join(f"{k}={v}" for k, v in metrics.items() if k != "global_step"))
        return metrics

    def _evaluate_build_graph(self, input_fn: Callable[..., Any], hooks: list[Any]) -> tuple[EstimatorSpec,
                                                                                          list[Any]]:
        """In the default graph: the global step, the EVAL inputs and model; the spec and every eval hook."""
        if strategy_of(self._config, "eval_distribute")[1]:
            from toolkit.estimator._distributed import evaluate_graph

            return evaluate_graph(self, input_fn, hooks)
        v1.train.get_or_create_global_step()
        features, labels = self._inputs(input_fn, ModeKeys.EVAL)
        spec = self._call(features, labels, ModeKeys.EVAL)
        self._warm_start_if_new()
        return spec, [*(spec.evaluation_hooks or ()), *hooks]

    def predict(self, input_fn: Callable[..., Any], predict_keys: Sequence[str] | None = None,
                hooks: Sequence[Any] | None = None, checkpoint_path: str | None = None,
                yield_single_examples: bool = True) -> Iterator[Any]:
        """Yields predictions (one example at a time by default) until ``input_fn`` ends."""
        from toolkit.estimator._evaluate import run_prediction

        hooks = _hooks("hooks", hooks)
        path = self._checkpoint_or_none(checkpoint_path, "predict")
        with self._new_graph().as_default():
            v1.train.get_or_create_global_step()
            features, _ = self._inputs(input_fn, ModeKeys.PREDICT)
            spec = self._call(features, None, ModeKeys.PREDICT)
            self._warm_start_if_new()
            yield from run_prediction(spec, self._saver_scaffold(spec), path, predict_keys=predict_keys,
                                      hooks=[*(spec.prediction_hooks or ()), *hooks], single=yield_single_examples,
                                      error=_restore_error, config=self._local_session_config())

    # ---- export -----------------------------------------------------------------
    def export_saved_model(self, export_dir_base: str | os.PathLike, serving_input_receiver_fn: Callable[[], Any],
                           assets_extra: Mapping[str, str] | None = None, as_text: bool = False,
                           checkpoint_path: str | None = None, experimental_mode: str = ModeKeys.PREDICT) -> str:
        """Exports the PREDICT graph with the newest checkpoint's variables to ``<export_dir_base>/<timestamp>``.

        The SavedModel serves with ``tf.saved_model.load(path).signatures["serving_default"]``.
        """
        from toolkit.estimator.export import export_graph

        path = self._export_checkpoint(checkpoint_path)
        with self._new_graph().as_default():
            v1.train.get_or_create_global_step()
            receiver = _receiver(serving_input_receiver_fn)
            spec = self._call(receiver.features, None, experimental_mode)
            return export_graph(spec, receiver, self._saver_scaffold(spec), path, os.fspath(export_dir_base),
                                as_text=as_text, assets_extra=assets_extra, error=_restore_error)

    def experimental_export_all_saved_models(self, export_dir_base: str | os.PathLike,
                                             input_receiver_fn_map: Mapping[str, Any],
                                             assets_extra: Mapping[str, str] | None = None, as_text: bool = False,
                                             checkpoint_path: str | None = None) -> str:
        """One SavedModel with a graph per mode of ``input_receiver_fn_map`` (tags ``train``/``eval``/``serve``)."""
        from toolkit.estimator._export_all import export_all_saved_models

        return export_all_saved_models(self, os.fspath(export_dir_base), input_receiver_fn_map,
                                       checkpoint=self._export_checkpoint(checkpoint_path), assets_extra=assets_extra,
                                       as_text=as_text, error=_restore_error)

    def _export_checkpoint(self, checkpoint_path: str | None) -> str:
        path = self._checkpoint_or_none(checkpoint_path, "export", fresh=True) if checkpoint_path else \
            self.latest_checkpoint() or export_fallback(self._warm_start)
        if path is None:
            raise EstimatorError(f"Couldn't find trained model at {self.model_dir}: export_saved_model() exports "
                                 "a checkpoint. Call train() first, or pass checkpoint_path=.", field="model_dir")
        return path

    @property
    def export_savedmodel(self) -> Any:
        raise AttributeError("Estimator has no `export_savedmodel` in TF 2: Please use `export_saved_model` "
                             "(tf.compat.v1.estimator.Estimator, toolkit.compat.v1's, still has the old name).")


class EstimatorV1(Estimator):
    """``tf.compat.v1.estimator.Estimator``: TF 2's Estimator plus the TF1 name ``export_savedmodel``."""

    def export_savedmodel(self, export_dir_base: str | os.PathLike,  # type: ignore[override]
                          serving_input_receiver_fn: Callable[[], Any], assets_extra: Mapping[str, str] | None = None,
                          as_text: bool = False, checkpoint_path: str | None = None,
                          strip_default_attrs: bool = False) -> str:
        del strip_default_attrs  # exports always strip default attributes
        return self.export_saved_model(export_dir_base, serving_input_receiver_fn, assets_extra=assets_extra,
                                       as_text=as_text, checkpoint_path=checkpoint_path)
