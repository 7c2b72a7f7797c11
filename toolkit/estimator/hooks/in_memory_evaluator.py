"""``InMemoryEvaluatorHook``: evaluate while training, from the training session's variables, without a checkpoint.

The EVAL graph is built once (in ``begin``); each evaluation copies the
current values of the variables both graphs share into it, runs the metric
updates over ``input_fn`` and writes the summaries where ``evaluate(name=...)``
would (``estimator.eval_dir(name)``): before training, every ``every_n_iter``
steps and at the end. One process only, as in TF.
"""
from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

__all__ = ["InMemoryEvaluatorHook"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1


class _FeedingSessionCreator(tf.compat.v1.train.SessionCreator):
    """A session on the eval graph whose variables are fed from the training session's values."""

    def __init__(self, graph: Any, init_ops: list[Any], feed_dict: dict[Any, Any], config: Any) -> None:
        self._graph, self._init_ops, self._feed, self._config = graph, init_ops, feed_dict, config

    def create_session(self) -> Any:
        session = v1.Session(graph=self._graph, config=self._config)
        session.run(self._init_ops, feed_dict=self._feed)
        return session


class InMemoryEvaluatorHook(tf.compat.v1.train.SessionRunHook):
    """Runs ``estimator.evaluate(input_fn, steps, hooks, name)`` on the live training variables.

    Args:
        estimator: the ``toolkit.estimator.Estimator`` being trained.
        input_fn: the evaluation input_fn.
        steps: evaluation batches (None: until input_fn ends).
        hooks: SessionRunHooks for the evaluation.
        name: evaluation name (summaries in ``model_dir/eval_<name>``).
        every_n_iter: evaluate every this many training steps of this process.
    """

    def __init__(self, estimator: Any, input_fn: Any, steps: int | None = None, hooks: Any = None,
                 name: str | None = None, every_n_iter: int = 100) -> None:
        from toolkit.estimator._args import check_hooks as _hooks
        from toolkit.estimator._args import check_positive as _positive
        from toolkit.estimator._construct import EstimatorError

        if every_n_iter is None or isinstance(every_n_iter, bool) or not isinstance(every_n_iter, int) \
                or every_n_iter <= 0:
            raise EstimatorError(f"invalid every_n_iter={every_n_iter}: expected an integer > 0, e.g. 100.",
                                 field="every_n_iter")
        config = estimator.config
        if config.num_ps_replicas > 0 or config.num_worker_replicas > 1:
            raise EstimatorError("InMemoryEvaluator supports only single machine (aka Local) setting: this task's "
                                 "TF_CONFIG describes a cluster. Evaluate on the evaluator task "
                                 "(train_and_evaluate) instead.", field="estimator")
        _positive("steps", steps)
        self._estimator, self._input_fn, self._steps, self._name = estimator, input_fn, steps, name
        self._hooks = _hooks("hooks", hooks)
        self._every = every_n_iter

    def begin(self) -> None:
        from toolkit.estimator._construct import EstimatorError
        from toolkit.estimator._graph import metric_ops

        self._iter_count = 0
        self._graph = tf.Graph()
        with self._graph.as_default():
            spec, self._all_hooks = self._estimator._evaluate_build_graph(self._input_fn, list(self._hooks))
            if spec.scaffold.saver is not None:
                raise EstimatorError("InMemoryEvaluator does not support custom saver: model_fn's Scaffold sets "
                                     "one. Evaluate from checkpoints instead.", field="estimator")
            if spec.scaffold.init_fn is not None:
                raise EstimatorError("InMemoryEvaluator does not support custom init_fn: model_fn's Scaffold "
                                     "sets one.", field="estimator")
            if v1.get_collection(v1.GraphKeys.SAVEABLE_OBJECTS):
                raise EstimatorError("InMemoryEvaluator does not support saveables other than global variables: "
                                     "model_fn adds objects to the SAVEABLE_OBJECTS collection, which it cannot "
                                     "copy from the training session. Evaluate from checkpoints instead.",
                                     field="estimator")
            values, self._updates = metric_ops(spec)
            self._values = {**values, "global_step": v1.train.get_global_step()}
            self._eval_vars = {v.name: v for v in v1.global_variables()}
            self._placeholders = {name: v1.placeholder(v.dtype.base_dtype, shape=v.shape)
                                  for name, v in self._eval_vars.items()}
            self._assign = {name: v1.assign(self._eval_vars[name], ph) for name, ph in self._placeholders.items()}
            self._local_init = v1.group(v1.local_variables_initializer(), v1.tables_initializer())
            self._uninitialized = {name: v.initializer for name, v in self._eval_vars.items()}

    def after_create_session(self, session: Any, coord: Any) -> None:
        train_vars = {v.name: v for v in v1.global_variables()}
        self._shared = sorted(set(train_vars) & set(self._eval_vars))
        self._train_vars = {name: train_vars[name] for name in self._shared}
        self._evaluate(session)

    def _evaluate(self, train_session: Any) -> None:
        from toolkit.estimator._evaluate import _StopAfterHook, write_eval_summary

        current = train_session.run(self._train_vars)
        init_ops = [self._uninitialized[n] for n in self._eval_vars if n not in current]
        init_ops += [self._assign[n] for n in current] + [self._local_init]
        feed = {self._placeholders[n]: value for n, value in current.items()}
        final = v1.train.FinalOpsHook(self._values)
        creator = _FeedingSessionCreator(self._graph, init_ops, feed, self._estimator._local_session_config())
        with self._graph.as_default(), v1.train.MonitoredSession(
                session_creator=creator, hooks=[*self._all_hooks, _StopAfterHook(self._steps), final]) as session:
            while not session.should_stop():
                session.run(self._updates)
        if final.final_ops_values is not None:
            write_eval_summary(self._estimator.eval_dir(self._name), final.final_ops_values)
            logger.info("in-memory evaluation at step %s: %s", final.final_ops_values["global_step"],
                        final.final_ops_values)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._iter_count += 1
        if self._iter_count % self._every == 0:
            self._evaluate(run_context.session)

    def end(self, session: Any) -> None:
        self._evaluate(session)
