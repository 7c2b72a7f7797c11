"""Early stopping (``tf.estimator.experimental.stop_if_*_hook``): end training when evaluation stops improving.

The chief's hook reads the evaluation summaries (``estimator.eval_dir()``, the
scalars ``evaluate`` writes) every ``run_every_secs`` seconds or
``run_every_steps`` steps; when ``should_stop_fn`` says so it sets a shared
``signal_early_stopping/STOP`` variable and stops. The other workers' hooks read
that variable (on the ps, in a between-graph cluster) and stop too.

Example:
    >>> hook = stop_if_no_decrease_hook(estimator, "loss", 1000)  # doctest: +SKIP
    >>> train_and_evaluate(estimator, TrainSpec(train_fn, hooks=[hook]), EvalSpec(eval_fn))  # doctest: +SKIP
"""
from __future__ import annotations

import collections
import glob
import logging
import operator
import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["make_early_stopping_hook", "read_eval_metrics", "stop_if_higher_hook", "stop_if_lower_hook",
           "stop_if_no_decrease_hook", "stop_if_no_increase_hook"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1
_EVENT_FILE_GLOB_PATTERN = "events.out.tfevents.*"


def _check_estimator(estimator: Any) -> None:
    from toolkit.estimator._construct import EstimatorTypeError
    from toolkit.estimator.estimator import Estimator

    if not isinstance(estimator, Estimator):
        raise EstimatorTypeError(f"`estimator` must have type `tf.estimator.Estimator`. Got: {type(estimator)}. "
                                 "Pass the toolkit.estimator.Estimator being trained.", field="estimator")


def make_early_stopping_hook(estimator: Any, should_stop_fn: Callable[[], bool], run_every_secs: float | None = 60,
                             run_every_steps: int | None = None) -> Any:
    """A hook that stops training once ``should_stop_fn()`` returns True (checked on the chief)."""
    from toolkit.estimator._construct import EstimatorError, EstimatorTypeError

    _check_estimator(estimator)
    if run_every_secs is not None and run_every_steps is not None:
        raise EstimatorError(f"Only one of `run_every_secs` and `run_every_steps` must be set: got "
                             f"run_every_secs={run_every_secs} and run_every_steps={run_every_steps}. Pass "
                             "run_every_secs=None with run_every_steps.", field="run_every_steps")
    if not callable(should_stop_fn):
        raise EstimatorTypeError(f"`should_stop_fn` must be callable; got {should_stop_fn!r}.",
                                 field="should_stop_fn")
    if estimator.config.is_chief:
        return _StopOnPredicateHook(should_stop_fn, run_every_secs, run_every_steps, estimator.config)
    return _CheckForStoppingHook(estimator.config)


def read_eval_metrics(eval_dir: str) -> collections.OrderedDict[int, dict[str, float]]:
    """``{global step: {metric: value}}`` from the scalar summaries in ``eval_dir``, by step."""
    metrics: dict[int, dict[str, float]] = collections.defaultdict(dict)
    for path in sorted(glob.glob(os.path.join(eval_dir, _EVENT_FILE_GLOB_PATTERN))):
        try:
            for event in v1.train.summary_iterator(path):
                if not event.HasField("summary"):
                    continue
                values = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
                if values:
                    metrics[event.step].update(values)
        except tf.errors.DataLossError as exc:  # a file being written: its complete events were read
            logger.warning("skipping the rest of %s (%s)", path, str(exc).splitlines()[0])
    return collections.OrderedDict(sorted(metrics.items()))


def _metric(metrics: dict[str, float], name: str, eval_dir: str) -> float:
    from toolkit.estimator._construct import EstimatorError

    if name not in metrics:
        raise EstimatorError(f"early stopping watches metric {name!r} but the evaluations in {eval_dir} report "
                             f"{sorted(metrics)}; pass one of those as metric_name.", field="metric_name")
    return metrics[name]


def _threshold_hook(estimator: Any, metric_name: str, threshold: float, higher_is_better: bool,
                    eval_dir: str | None, min_steps: int, run_every_secs: float | None,
                    run_every_steps: int | None) -> Any:
    _check_estimator(estimator)
    eval_dir = eval_dir or estimator.eval_dir()
    better = operator.gt if higher_is_better else operator.lt

    def stop_if_threshold_crossed() -> bool:
        for step, metrics in read_eval_metrics(eval_dir).items():
            if step < min_steps:
                continue
            value = _metric(metrics, metric_name, eval_dir)
            if better(value, threshold):
                logger.info("At step %s, metric %r has value %s which is %s the configured threshold (%s) for "
                            "early stopping.", step, metric_name, value,
                            "greater than" if higher_is_better else "less than", threshold)
                return True
        return False

    return make_early_stopping_hook(estimator, stop_if_threshold_crossed, run_every_secs, run_every_steps)


def _no_improvement_hook(estimator: Any, metric_name: str, max_steps_without_improvement: int,
                         higher_is_better: bool, eval_dir: str | None, min_steps: int,
                         run_every_secs: float | None, run_every_steps: int | None) -> Any:
    _check_estimator(estimator)
    eval_dir = eval_dir or estimator.eval_dir()
    better = operator.gt if higher_is_better else operator.lt

    def stop_if_no_improvement() -> bool:
        best: float | None = None
        best_step = 0
        for step, metrics in read_eval_metrics(eval_dir).items():
            if step < min_steps:
                continue
            value = _metric(metrics, metric_name, eval_dir)
            if best is None or better(value, best):
                best, best_step = value, step
            if step - best_step >= max_steps_without_improvement:
                logger.info("No %s in metric %r for %s steps, which is greater than or equal to max steps (%s) "
                            "configured for early stopping.", "increase" if higher_is_better else "decrease",
                            metric_name, step - best_step, max_steps_without_improvement)
                return True
        return False

    return make_early_stopping_hook(estimator, stop_if_no_improvement, run_every_secs, run_every_steps)


def stop_if_higher_hook(estimator: Any, metric_name: str, threshold: float, eval_dir: str | None = None,
                        min_steps: int = 0, run_every_secs: float | None = 60,
                        run_every_steps: int | None = None) -> Any:
    """Stops once an evaluation at step >= ``min_steps`` reports ``metric_name`` above ``threshold``."""
    return _threshold_hook(estimator, metric_name, threshold, True, eval_dir, min_steps, run_every_secs,
                           run_every_steps)


def stop_if_lower_hook(estimator: Any, metric_name: str, threshold: float, eval_dir: str | None = None,
                       min_steps: int = 0, run_every_secs: float | None = 60,
                       run_every_steps: int | None = None) -> Any:
    """Stops once an evaluation at step >= ``min_steps`` reports ``metric_name`` below ``threshold``."""
    return _threshold_hook(estimator, metric_name, threshold, False, eval_dir, min_steps, run_every_secs,
                           run_every_steps)


def stop_if_no_increase_hook(estimator: Any, metric_name: str, max_steps_without_increase: int,
                             eval_dir: str | None = None, min_steps: int = 0, run_every_secs: float | None = 60,
                             run_every_steps: int | None = None) -> Any:
    """Stops once ``metric_name`` has not increased for ``max_steps_without_increase`` global steps."""
    return _no_improvement_hook(estimator, metric_name, max_steps_without_increase, True, eval_dir, min_steps,
                                run_every_secs, run_every_steps)


def stop_if_no_decrease_hook(estimator: Any, metric_name: str, max_steps_without_decrease: int,
                             eval_dir: str | None = None, min_steps: int = 0, run_every_secs: float | None = 60,
                             run_every_steps: int | None = None) -> Any:
    """Stops once ``metric_name`` has not decreased for ``max_steps_without_decrease`` global steps."""
    return _no_improvement_hook(estimator, metric_name, max_steps_without_decrease, False, eval_dir, min_steps,
                                run_every_secs, run_every_steps)


def _stop_var(config: Any) -> Any:
    """The shared stop flag, on the ps in a between-graph cluster (so every worker reads the chief's)."""
    from toolkit.estimator import _session

    with v1.device(_session.replica_setter(config)), \
            v1.variable_scope("signal_early_stopping", values=[], reuse=v1.AUTO_REUSE):
        return v1.get_variable("STOP", shape=[], dtype=tf.bool, initializer=v1.initializers.constant(False),
                               collections=[v1.GraphKeys.GLOBAL_VARIABLES], trainable=False)


class _StopOnPredicateHook(tf.compat.v1.train.SessionRunHook):
    """On the chief: asks ``should_stop_fn`` on a timer; on True sets the stop flag and stops."""

    def __init__(self, should_stop_fn: Callable[[], bool], run_every_secs: float | None,
                 run_every_steps: int | None, config: Any) -> None:
        self._should_stop_fn, self._config = should_stop_fn, config
        self._timer = v1.train.SecondOrStepTimer(every_secs=run_every_secs, every_steps=run_every_steps)

    def begin(self) -> None:
        self._global_step = v1.train.get_global_step()
        self._stop_op = v1.assign(_stop_var(self._config), True)

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step = run_values.results
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if self._should_stop_fn():
                logger.info("Requesting early stopping at global step %d", step)
                run_context.session.run(self._stop_op)
                run_context.request_stop()


class _CheckForStoppingHook(tf.compat.v1.train.SessionRunHook):
    """On the other workers: stops once the chief has set the stop flag."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def begin(self) -> None:
        self._stop = _stop_var(self._config)

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self._stop)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if run_values.results:
            logger.info("Early stopping requested, suspending run.")
            run_context.request_stop()
