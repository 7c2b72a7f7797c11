"""``train_and_evaluate``: one call, started in every task, does what that task's role needs.

The role comes from TF_CONFIG (through ``RunConfig``) and is dispatched
through ``_ROLES``:

* ``local`` (no TF_CONFIG): train, evaluate, export, all in this process;
* ``server`` (every ps, and workers of a cluster with ps): serve the chief's
  ParameterServerStrategy, then exit the process with the chief's code (0 after
  success) when it says goodbye: hand-started ps tasks end by themselves;
* ``chief``: train (coordinating the workers under parameter_server, or as one
  of the MultiWorkerMirrored workers), then evaluate the final checkpoint and
  export;
* ``worker`` (MultiWorkerMirrored, no ps): train alongside the chief;
* ``evaluator``: evaluate each new checkpoint in ``model_dir`` (at most one
  per ``throttle_secs``, the final one always) and stop after ``max_steps``.

Unlike ``tf.estimator``, the chief evaluates the final checkpoint itself, so a
cluster without an evaluator task still reports metrics.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Mapping

from toolkit.estimator.spec import EvalSpec, SpecError, TrainSpec

__all__ = ["train_and_evaluate", "role_of", "ROLES"]

logger = logging.getLogger(__name__)

_POLL_SECONDS = 1.0
_EVALUATOR_PATIENCE = 600.0


def role_of(config: Any) -> str:
    """This task's role for ``train_and_evaluate``: local, server, evaluator, chief or worker."""
    from strategies import is_server_role

    cfg = config.tf_config
    if cfg.is_local:
        return "local"
    if cfg.is_evaluator:
        return "evaluator"
    if is_server_role(cfg):
        return "server"
    return "chief" if config.is_chief else "worker"


def _export(estimator: Any, eval_spec: EvalSpec) -> list[str]:
    base = os.path.join(estimator.model_dir, "export", eval_spec.name or "exporter")
    return [estimator.export_saved_model(base)]


def _evaluate(estimator: Any, eval_spec: EvalSpec, checkpoint_path: str | None = None) -> dict[str, float]:
    return estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, checkpoint_path=checkpoint_path,
                              name=eval_spec.name)


def _run_local(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    estimator.train(train_spec.input_fn, max_steps=train_spec.max_steps)
    return _evaluate(estimator, eval_spec), _export(estimator, eval_spec)


def _run_server(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    from strategies import run_role

    config = estimator.config
    run_role(config.tf_config, strategy=config.train_distribute, chief_start_timeout=config.chief_start_timeout,
             chief_lost_after=config.chief_lost_after)  # exits the process
    raise SpecError("tf_config", "this task should have served and exited; check TF_CONFIG's task type.")


def _run_worker(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    estimator.train(train_spec.input_fn, max_steps=train_spec.max_steps)
    return None, []


def _run_evaluator(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    from toolkit.estimator.estimator import _global_step_of
    from toolkit.training.evaluation import evaluate_continuously

    time.sleep(eval_spec.start_delay_secs)
    results = evaluate_continuously(estimator.model_dir, lambda path: _evaluate(estimator, eval_spec, path),
                                    final_step=train_spec.max_steps, timeout=_EVALUATOR_PATIENCE,
                                    throttle_secs=eval_spec.throttle_secs, poll_secs=_POLL_SECONDS,
                                    step_of=_global_step_of)
    return (results[-1][1] if results else None), []


def _run_chief(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    estimator.train(train_spec.input_fn, max_steps=train_spec.max_steps)
    return _evaluate(estimator, eval_spec), _export(estimator, eval_spec)


ROLES: Mapping[str, Callable[[Any, TrainSpec, EvalSpec], tuple[Any, list[str]]]] = {
    "local": _run_local,
    "server": _run_server,
    "chief": _run_chief,
    "worker": _run_worker,
    "evaluator": _run_evaluator,
}


def train_and_evaluate(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[str]]:
    """Trains and evaluates as this task's role requires (see the module docstring).

    Args:
        estimator: an ``Estimator``.
        train_spec: input and ``max_steps``.
        eval_spec: input, ``steps``, ``start_delay_secs``, ``throttle_secs``.

    Returns:
        ``(eval_result, export_results)`` like ``tf.estimator.train_and_evaluate``:
        the metrics dict (with ``global_step``) and the export directories; ``(None, [])``
        in MultiWorkerMirrored workers. ps and PS-worker tasks exit instead of returning.
    """
    from toolkit.estimator.estimator import Estimator

    if not isinstance(estimator, Estimator):
        raise SpecError("estimator", f"`estimator` is {type(estimator).__name__}; expected a toolkit.estimator.Estimator.")
    if not isinstance(train_spec, TrainSpec):
        raise SpecError("train_spec", f"`train_spec` is {type(train_spec).__name__}; expected a TrainSpec.")
    if not isinstance(eval_spec, EvalSpec):
        raise SpecError("eval_spec", f"`eval_spec` is {type(eval_spec).__name__}; expected an EvalSpec.")
    role = role_of(estimator.config)
    logger.info("train_and_evaluate: %s-%d runs as %s", estimator.config.task_type, estimator.config.task_id, role)
    return ROLES[role](estimator, train_spec, eval_spec)
