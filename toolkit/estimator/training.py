"""``train_and_evaluate``: one call, started in every task, does what that task's role needs.

The role comes from TF_CONFIG (through ``RunConfig``), as in ``tf.estimator``:

* ``local`` (no TF_CONFIG): train to ``max_steps``; as tf.estimator's ``run_local``, evaluate and run
  the exporters after each checkpoint save once ``throttle_secs`` have passed since the last
  evaluation (the first checkpoint, of the untrained model, is skipped), and the last checkpoint
  at the end if it was not evaluated yet;
* ``ps``: serve the variables, then exit 0 when the chief says goodbye;
* ``chief``: train (between-graph, its own client), wait for the workers to
  leave, then end the ps tasks (the toolkit's goodbye);
* ``master`` (CMLE's chief): train as the chief, and evaluate each new
  checkpoint (at most one per ``throttle_secs``) and run the exporters, the
  final export included, as tf.estimator's ``run_master``;
* ``worker``: train its own graph against the ps, then return. Given
  ``RunConfig(experimental_max_worker_delay_secs=N)``, worker i first waits
  ``min(N, (i + 1) * 5)`` seconds (between-graph, with its server up), tf.estimator's start
  schedule (asynchronous training then starts from the chief's first steps,
  not from every worker's stale gradients at once). Without it a worker
  starts at once, as soon as the chief has initialised: tf.estimator's
  default (N = 60) left the workers of a short job idle;
* ``evaluator``: evaluate each new checkpoint in ``model_dir`` (at most one
  per ``throttle_secs``, the final one always), run the exporters, stop once
  a checkpoint reaches ``max_steps``.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from toolkit.estimator._roles import role_of, serve_if_ps
from toolkit.estimator._strategy_kinds import strategy_trains
from toolkit.estimator.spec import EvalSpec, SpecError, SpecTypeError, TrainSpec

__all__ = ["ROLES", "train_and_evaluate"]

logger = logging.getLogger(__name__)

_PATIENCE_SECS = 600.0
#: tf.estimator's start delay of worker i: (i + 1) * _DELAY_SECS_PER_WORKER, at most experimental_max_worker_delay_secs
_DELAY_SECS_PER_WORKER = 5


def _export_all(estimator: Any, eval_spec: EvalSpec, path: str, result: Mapping[str, Any], final: bool) -> list[str]:
    exports = []
    for exporter in eval_spec.exporters:
        base = os.path.join(estimator.model_dir, "export", exporter.name)
        exported = exporter.export(estimator, base, path, result, final)
        if exported:
            exports.append(exported)
    return exports


def _evaluate_and_export(estimator: Any, eval_spec: EvalSpec, path: str, max_steps: int | None, *,
                         final: bool = False) -> tuple[Any, list[str]]:
    """Evaluates ``path`` and runs the exporters; the final export once the checkpoint reaches ``max_steps``."""
    result = estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, hooks=eval_spec.hooks,
                                checkpoint_path=path, name=eval_spec.name)
    final = final or (max_steps is not None and result["global_step"] >= max_steps)
    return result, _export_all(estimator, eval_spec, path, result, final)


def _train(estimator: Any, train_spec: TrainSpec, saving_listeners: list[Any] | None = None) -> None:
    estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps,
                    saving_listeners=[*train_spec.saving_listeners, *(saving_listeners or ())])


def _run_local(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    from toolkit.estimator._master import EvaluateOnNewCheckpoint

    if not any(estimator.config.checkpoint_every.values()):  # no checkpoint saves: evaluate once, at the end
        _train(estimator, train_spec)
        return _evaluate_and_export(estimator, eval_spec, estimator.latest_checkpoint(), None, final=True)

    last: list[tuple[Any, list[str]]] = []

    def evaluate_and_export(path: str, step: int) -> tuple[Any, list[str]]:
        last[:] = [_evaluate_and_export(estimator, eval_spec, path, train_spec.max_steps)]
        return last[0]

    listener = EvaluateOnNewCheckpoint(evaluate_and_export, estimator.latest_checkpoint, eval_spec.throttle_secs,
                                       skip_first=True)
    _train(estimator, train_spec, [listener])
    if not last:  # training saved no checkpoint after the first one
        return _evaluate_and_export(estimator, eval_spec, estimator.latest_checkpoint(), None, final=True)
    return last[0]  # as TF: the last evaluation's metrics and the exports it made


def _run_ps(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    serve_if_ps(estimator.config)  # exits the process
    raise SpecError("this ps task should have served and exited; check TF_CONFIG's task type.", field="config")


def _run_chief(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec,
               saving_listeners: list[Any] | None = None) -> tuple[Any, list[str]]:
    from toolkit.estimator._session import goodbye

    try:
        _train(estimator, train_spec, saving_listeners)
    except BaseException:
        if estimator.config.num_ps_replicas:
            goodbye(estimator.config, 1)
        raise
    if estimator.config.num_ps_replicas:
        goodbye(estimator.config, 0)
    return None, []


def _run_master(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    from toolkit.estimator._master import EvaluateOnNewCheckpoint

    final_done = False

    def evaluate_and_export(path: str, step: int) -> tuple[Any, list[str]]:
        # Workers may carry the global step past max_steps between two checkpoints: the final export happens once.
        nonlocal final_done
        result, exports = _evaluate_and_export(estimator, eval_spec, path, None if final_done else train_spec.max_steps)
        final_done = final_done or (train_spec.max_steps is not None and result["global_step"] >= train_spec.max_steps)
        return result, exports

    listener = EvaluateOnNewCheckpoint(evaluate_and_export, estimator.latest_checkpoint, eval_spec.throttle_secs)
    _run_chief(estimator, train_spec, eval_spec, [listener])
    return listener.eval_result, listener.export_results


def worker_start_delay(config: Any) -> int:
    """Seconds a ``worker`` task waits before training under ``train_and_evaluate`` (see the module docstring).

    tf.estimator's schedule, ``min(experimental_max_worker_delay_secs, (index + 1) * 5)``, when the RunConfig sets
    that cap; 0 without it, and on every other task.
    """
    cap = config.experimental_max_worker_delay_secs
    if cap is None or config.task_type != "worker" or config.is_chief:
        return 0
    return max(min(int(cap), (config.task_id + 1) * _DELAY_SECS_PER_WORKER), 0)


def _run_worker(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    config = estimator.config
    delay = worker_start_delay(config)
    if delay:
        if config.num_ps_replicas and not strategy_trains(config):
            # between-graph: its server first, as tf.estimator did, so none waits on it
            from toolkit.estimator._session import server_target

            server_target(config)
        logger.info("Waiting %d secs before starting training.", delay)
        time.sleep(delay)
    _train(estimator, train_spec)
    return None, []


def _run_evaluator(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    import tensorflow as tf

    from toolkit.training.evaluation import evaluate_continuously

    time.sleep(eval_spec.start_delay_secs)
    exports: list[str] = []
    max_steps = train_spec.max_steps

    def _global_step(path: str) -> int:
        return int(tf.train.load_variable(path, "global_step"))

    def evaluate(path: str) -> Any:
        result, done = _evaluate_and_export(estimator, eval_spec, path, max_steps)
        exports.extend(done)
        return result

    results = evaluate_continuously(estimator.model_dir, evaluate, final_step=max_steps, timeout=_PATIENCE_SECS,
                                    throttle_secs=eval_spec.throttle_secs, step_of=_global_step)
    return (results[-1][1] if results else None), exports


ROLES: Mapping[str, Callable[[Any, TrainSpec, EvalSpec], tuple[Any, list[str]]]] = {
    "local": _run_local,
    "ps": _run_ps,
    "chief": _run_chief,
    "master": _run_master,
    "worker": _run_worker,
    "evaluator": _run_evaluator,
}


def train_and_evaluate(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    """Trains and evaluates as this task's role requires (see the module docstring).

    Returns:
        ``(eval_result, export_results)`` like ``tf.estimator.train_and_evaluate``:
        the metrics dict (with ``global_step``) and the export directories locally,
        on the evaluator and on a ``master``; ``(None, [])`` on the chief and workers. ps tasks exit.
    """
    from toolkit.estimator.estimator import Estimator

    for field, value, cls, what in (("estimator", estimator, Estimator, "tf.estimator.Estimator"),
                                    ("train_spec", train_spec, TrainSpec, "tf.estimator.TrainSpec"),
                                    ("eval_spec", eval_spec, EvalSpec, "tf.estimator.EvalSpec")):
        if not isinstance(value, cls):
            raise SpecTypeError(f"`{field}` must have type `{what}`. Got: {type(value)}. Pass a "
                                f"toolkit.estimator.{cls.__name__}.", field=field)
    config = estimator.config
    if config.task_type == "evaluator" and config.task_id > 0:
        raise SpecError(f"TF_CONFIG `task.index` is {config.task_id} for the evaluator; For distributed training, "
                        "there can only be one `evaluator` task (with task id 0). Set \"index\": 0.",
                        field="task.index")
    role = role_of(estimator.config)
    if role == "chief" and estimator.config.task_type == "master":
        role = "master"
    logger.info("train_and_evaluate: %s-%d runs as %s", estimator.config.task_type, estimator.config.task_id, role)
    return ROLES[role](estimator, train_spec, eval_spec)
