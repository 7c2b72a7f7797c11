"""The Estimator under ``RunConfig(train_distribute=, eval_distribute=)``, as tf.estimator 2.15 ran it.

tf.estimator's ``_actual_train_model_distributed``, in a fresh ``tf.Graph``:

* under ``strategy.scope()`` (and the strategy's loss scaling for TF1 optimizers),
  ``input_fn`` is called once per input pipeline through
  ``strategy.make_input_fn_iterator`` (an ``input_context`` argument gets the
  ``InputContext``; its batch is the per-replica batch, as in TF);
* ``model_fn`` runs once per replica (``call_for_each_replica``); a TF1
  optimizer divides each replica's loss by the replica count, so the summed
  gradients are the global batch's mean; the reported loss is the replicas'
  mean then (their sum otherwise, TF's rule); ``train_op`` is the replicas' group,
  so the global step advances once per synchronous step;
* the hooks of the first replica's ``EstimatorSpec`` run.

``MultiWorkerMirroredStrategy`` (kind ``collective``): each worker is a client of
its own graph against its own server (the one the strategy started), with the
strategy's session config; gradients are all-reduced. The chief (the ``chief``
task, or worker 0 of a workers-only cluster, as TF's distribute coordinator
chose) initialises, and writes checkpoints and summaries; the others restore
what was there when they started and write nothing.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from toolkit._compat.tensorflow import estimator_loss_scaling, loss_scaled_by_optimizer
from toolkit.estimator._graph import input_fn_result, metric_ops
from toolkit.estimator._strategy_kinds import strategy_of
from toolkit.estimator.spec import EstimatorSpec, ModeKeys, SpecError

__all__ = ["eval_session_config", "evaluate_graph", "train_distributed"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1


class _InitializeIterator(tf.compat.v1.train.SessionRunHook):
    """Initialises the distributed input iterator in each new session (TF's ``DistributedIteratorInitializerHook``)."""

    def __init__(self, iterator: Any) -> None:
        self._iterator, self._op = iterator, None

    def begin(self) -> None:
        self._op = self._iterator.initializer  # built before the session finalizes the graph

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self._op)


def _inputs(estimator: Any, strategy: Any, input_fn: Callable[..., Any], mode: str) -> tuple[Any, Any, Any]:
    """``(features, labels, iterator)``: per-replica values from ``input_fn``'s Dataset, one per input pipeline."""

    def dataset_fn(context: Any) -> Any:
        result = input_fn_result(input_fn, mode, params=estimator.params, config=estimator.config,
                                 input_context=context)
        if not isinstance(result, tf.data.Dataset):
            raise SpecError(f"input_fn returned {type(result).__name__}; under a tf.distribute strategy "
                            "(RunConfig train_distribute/eval_distribute) input_fn must return a tf.data.Dataset "
                            "of (features, labels), which the strategy splits between replicas, as in TF. Wrap "
                            "the tensors: tf.data.Dataset.from_tensor_slices(...).batch(per_replica_batch).",
                            field="input_fn")
        return result

    iterator = strategy.make_input_fn_iterator(dataset_fn)
    result = iterator.get_next()
    if isinstance(result, (tuple, list)) and len(result) == 2:
        return result[0], result[1], iterator
    return result, None, iterator


def _per_replica(strategy: Any, build: Callable[[EstimatorSpec], Any], estimator: Any, features: Any, labels: Any,
                 mode: str) -> tuple[Any, EstimatorSpec]:
    """Calls model_fn in every replica; ``build(spec)``'s per-replica results and replica 0's spec."""
    specs: dict[int, EstimatorSpec] = {}

    def replica_fn(replica_features: Any, replica_labels: Any) -> Any:
        spec = estimator._call(replica_features, replica_labels, mode)
        replica = tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group)
        specs[int(replica or 0)] = spec
        return build(spec)

    grouped = strategy.extended.call_for_each_replica(replica_fn, args=(features, labels))
    return grouped, specs[min(specs)]


def _reported(strategy: Any, graph: tf.Graph, value: Any) -> Any:
    """tf.estimator's reported loss: the replicas' mean when the optimizer scaled them, else their sum."""
    reduction = tf.distribute.ReduceOp.MEAN if loss_scaled_by_optimizer(graph) else tf.distribute.ReduceOp.SUM
    return strategy.reduce(reduction, value, axis=None)


def _session_target(config: Any, strategy: Any, kind: str | None) -> tuple[str, Any]:
    """``(master, ConfigProto)``: this worker's own server and the strategy's config, or in-process."""
    base = v1.ConfigProto(allow_soft_placement=True)
    if config.session_config is not None:
        base.CopyFrom(config.session_config)
    if kind != "collective":
        # a TF1 session makes one CPU device unless told more: the strategy's logical CPUs (TF1's device_count)
        cpus = [d for d in (*strategy.extended.worker_devices, *strategy.extended.parameter_devices)
                if tf.DeviceSpec.from_string(d).device_type == "CPU"]
        wanted = 1 + max((tf.DeviceSpec.from_string(d).device_index or 0 for d in cpus), default=0)
        base.device_count["CPU"] = max(base.device_count.get("CPU", 1), wanted)
        return "", base
    resolver = strategy.cluster_resolver
    address = resolver.cluster_spec().task_address(resolver.task_type, resolver.task_id)
    return f"{resolver.rpc_layer or 'grpc'}://{address}", strategy.update_config_proto(base)


def eval_session_config(config: Any) -> Any:
    """The session config evaluation under ``eval_distribute`` needs (its logical CPUs included)."""
    strategy, kind = strategy_of(config, "eval_distribute")
    return _session_target(config, strategy, kind)[1]


def train_distributed(estimator: Any, input_fn: Callable[..., Any], hooks: list[Any], steps: int | None,
                      max_steps: int | None, listeners: list[Any]) -> None:
    """``Estimator.train`` under ``config.train_distribute`` (see the module docstring)."""
    config = estimator.config
    strategy, kind = strategy_of(config, "train_distribute")
    start_checkpoint = estimator.latest_checkpoint()
    with estimator._new_graph().as_default() as graph:
        with strategy.scope(), estimator_loss_scaling(strategy):
            features, labels, iterator = _inputs(estimator, strategy, input_fn, ModeKeys.TRAIN)
            v1.train.get_or_create_global_step()
            (loss, train_op), first = _per_replica(strategy, lambda s: (s.loss, s.train_op), estimator, features,
                                                   labels, ModeKeys.TRAIN)
            loss = _reported(strategy, graph, loss)
            train_op = strategy.group(train_op)
            estimator._warm_start_if_new()
        v1.summary.scalar("loss", loss)
        spec = EstimatorSpec(ModeKeys.TRAIN, loss=loss, train_op=train_op, scaffold=first.scaffold,
                             training_hooks=first.training_hooks, training_chief_hooks=first.training_chief_hooks)
        stop = v1.train.StopAtStepHook(num_steps=steps, last_step=max_steps if max_steps else
                                       (None if steps else 2**62))
        all_hooks = [_InitializeIterator(iterator), *hooks, stop, *spec.training_hooks,
                     v1.train.NanTensorHook(spec.loss)]  # type: ignore[misc]
        master, proto = _session_target(config, strategy, kind)
        logger.info("%s: training under %s, %d replicas in sync%s", config.task_type, type(strategy).__name__,
                    strategy.num_replicas_in_sync, f" (session {master})" if master else "")
        if config.is_chief and kind != "collective":
            estimator._run_training(spec, all_hooks, listeners, master, session_config=proto)
        else:
            _run_collective(estimator, spec, all_hooks, master, proto, start_checkpoint, listeners)


class _ChiefWriter(tf.compat.v1.train.SessionRunHook):
    """The chief's checkpoints (with the saving listeners) and loss summaries, collective-safe.

    It fetches the same tensors every step (the summary reads the loss every worker fetches anyway)
    and saves after a step and at the end, never before the first step (``CheckpointSaverHook``'s
    save at session creation broke the first step's collectives), so the chief's steps run the
    same collectives as the other workers'.
    """

    def __init__(self, config: Any, scaffold: Any, listeners: list[Any]) -> None:
        self._config, self._scaffold, self._listeners = config, scaffold, listeners
        every = config.checkpoint_every
        self._timer = v1.train.SecondOrStepTimer(every_secs=every["save_checkpoints_secs"],
                                                 every_steps=every["save_checkpoints_steps"])
        self._saves = any(every.values())
        self._last_summary = -1
        self._step = 0

    def begin(self) -> None:
        self._writer = v1.summary.FileWriterCache.get(self._config.model_dir)
        self._summary = v1.summary.merge_all()
        self._global_step = v1.train.get_global_step()
        for listener in self._listeners:
            listener.begin()

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs({} if self._summary is None else {"summary": self._summary})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._step = step = int(run_context.session.run(self._global_step))
        every = self._config.save_summary_steps
        if "summary" in run_values.results and every and step - self._last_summary >= every:
            self._writer.add_summary(run_values.results["summary"], step)
            self._last_summary = step
        if self._saves and self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            self._save(run_context.session, step)

    def end(self, session: Any) -> None:
        if self._saves and self._timer.last_triggered_step() != self._step:
            self._save(session, self._step)
        for listener in self._listeners:
            listener.end(session, self._step)
        self._writer.flush()

    def _save(self, session: Any, step: int) -> None:
        import os

        for listener in self._listeners:
            listener.before_save(session, step)
        saver = self._scaffold.saver or v1.get_collection(v1.GraphKeys.SAVERS)[0]
        saver.save(session, os.path.join(self._config.model_dir, "model.ckpt"), global_step=step)
        for listener in self._listeners:
            listener.after_save(session, step)


def _run_collective(estimator: Any, spec: EstimatorSpec, hooks: list[Any], master: str, proto: Any,
                    start_checkpoint: str | None, listeners: list[Any]) -> None:
    """A collective worker: every one restores the same checkpoint (the one there when it started) and
    steps in sync; only the chief writes checkpoints and summaries.

    Every worker runs the same fetches each step (a collective that one worker ran alone would wait
    forever), so the chief does not use ``MonitoredTrainingSession``, whose extra hooks fetch on
    steps of their own.
    """
    scaffold = estimator._saver_scaffold(spec)
    if estimator.config.is_chief:
        hooks = [*hooks, *(spec.training_chief_hooks or ()), _ChiefWriter(estimator.config, scaffold, listeners)]
    creator = v1.train.ChiefSessionCreator(scaffold=scaffold, master=master, config=proto,
                                           checkpoint_filename_with_path=start_checkpoint)
    steps = 0
    with v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as session:
        while not session.should_stop():
            session.run(spec.train_op)
            steps += 1
    logger.info("%s-%d: %d synchronous steps", estimator.config.task_type, estimator.config.task_id, steps)
    estimator.last_local_steps = steps


def evaluate_graph(estimator: Any, input_fn: Callable[..., Any], hooks: list[Any]) -> tuple[EstimatorSpec, list[Any]]:
    """In the default graph, under ``config.eval_distribute``: a spec whose metrics aggregate every replica.

    Each replica updates its TF1 metrics (``tf.compat.v1.metrics`` aggregate
    across replicas when read), plus the mean of its loss; the values are read
    once, the updates run as one group.
    """
    strategy, _ = strategy_of(estimator.config, "eval_distribute")
    graph = v1.get_default_graph()
    with strategy.scope(), estimator_loss_scaling(strategy):
        features, labels, iterator = _inputs(estimator, strategy, input_fn, ModeKeys.EVAL)
        v1.train.get_or_create_global_step()
        (values, updates, loss), first = _per_replica(strategy, lambda s: (*metric_ops(s), s.loss), estimator,
                                                      features, labels, ModeKeys.EVAL)
        update = strategy.group(updates)
        read = {name: strategy.experimental_local_results(value)[0] for name, value in values.items()}
        loss = _reported(strategy, graph, loss)
    spec = EstimatorSpec(ModeKeys.EVAL, loss=loss, scaffold=first.scaffold,
                         eval_metric_ops={name: (value, update) for name, value in read.items()},
                         evaluation_hooks=first.evaluation_hooks)
    return spec, [_InitializeIterator(iterator), *(first.evaluation_hooks or ()), *hooks]

