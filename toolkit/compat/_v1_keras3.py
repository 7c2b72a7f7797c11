"""A clear error for Keras 3 training in a program that ``toolkit.compat.v1`` switched to graph mode.

Keras 3 needs eager execution to train. In a TF1 graph program its layers
still build into the graph (and train with a ``tf.train`` optimizer), but its
``fit``/``evaluate``/``predict`` fail deep inside with an error about dataset
iteration, and its optimizers' ``apply_gradients`` returns a variable instead
of an update op, so a session "trains" nothing. Those entry points are wrapped
here, only in a process that was switched to graph mode, to say what happened
and what to do instead. Processes that keep eager execution never see this.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["GUARDED", "guard_keras3"]

#: (class path, method) pairs that need eager execution
GUARDED = (("Model", "fit"), ("Model", "evaluate"), ("Model", "predict"), ("Model", "train_on_batch"),
           ("optimizers.Optimizer", "apply_gradients"), ("optimizers.Optimizer", "apply"))


def _task() -> str:
    from tf_config import TFConfig, TFConfigError

    try:
        cfg = TFConfig.from_env()
    except TFConfigError:
        return "this task (its TF_CONFIG is invalid)"
    return "this process (no TF_CONFIG)" if cfg.is_local else f"task {cfg.task_type}-{cfg.task_index}"


def _refusal(what: str) -> Exception:
    from toolkit.training import TrainingError

    layout = "a cluster" if os.environ.get("TF_CONFIG") else "one process"
    return TrainingError(
        f"Keras 3's {what} needs eager execution, but {_task()} runs TF1's graph mode on {layout}: its main "
        "script imported toolkit.compat.v1 at the top, which switches the process to graph mode as TF1 had it, "
        "and Keras 3's training loop and optimizers do not run in a TF1 graph (its layers do). Fix: train the "
        "graph with a tf.train optimizer (optimizer.minimize(loss, global_step=...)), with the model built from "
        "tf.layers, tf.keras (Keras 2) or Keras 3 layers, or run the Keras 3 code in a program that imports "
        "tensorflow, not toolkit.compat.v1.",
        field="model")


def _estimator_graph() -> bool:
    """An Estimator's graph maps Keras 3 optimizers to their TF1 twins (toolkit.estimator._keras3_optimizers)."""
    from toolkit.estimator._keras3_optimizers import in_estimator_graph

    return in_estimator_graph()


def _guard(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not tf.compat.v1.executing_eagerly_outside_functions() and not _estimator_graph():
            raise _refusal(what)
        return method(*args, **kwargs)

    guarded.tfdist_graph_guard = True  # type: ignore[attr-defined]
    return guarded


def guard_keras3() -> None:
    """Wraps Keras 3's training entry points so that, in graph mode, they raise the error above."""
    import keras

    for owner_path, name in GUARDED:
        owner: Any = keras
        for part in owner_path.split("."):
            owner = getattr(owner, part)
        method = getattr(owner, name)
        if not getattr(method, "tfdist_graph_guard", False):
            setattr(owner, name, _guard(method, f"{owner_path.rpartition('.')[2]}.{name}()"))
