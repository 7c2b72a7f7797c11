"""What ``fit`` trains with, read from the model ``model_fn`` compiled, as Keras' ``model.fit`` reads it.

``model_fn`` builds the model and compiles it, as TensorFlow's distributed
tutorials write it::

    def model_fn():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=10)
        return model

Every task that builds the model (the chief, each between-graph worker, the
evaluator) reads the same arguments from its own copy, so each knob has one
name, Keras' own, and reaches every task without being passed around.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, cast

import keras

from tf_config.checks import check_int
from toolkit.training.config import TrainingError
from toolkit.training.state import OptimizerSpec, compiled_arguments
from toolkit.training.step import Forward, ResolvedMetric, make_forward, resolve_metrics

__all__ = ["Compiled", "read_compiled"]

logger = logging.getLogger(__name__)

_EXAMPLE = ("model.compile(optimizer='adam', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), "
            "metrics=['accuracy'])")  # the same as the uncompiled model's error (state.compiled_arguments)


@dataclasses.dataclass(frozen=True)
class Compiled:
    """``model.compile``'s arguments as the engine runs them.

    Attributes:
        optimizer: the optimizer argument (re-created under the strategy's scope from its config).
        forward: ``(model, features, labels, training) -> (per-example loss, predictions)``.
        metrics: the engine's ``{name: per-example function}``.
        steps_per_execution: steps per traced call (Keras' meaning; Keras' default is 1).
    """

    optimizer: OptimizerSpec
    forward: Forward
    metrics: dict[str, ResolvedMetric]
    steps_per_execution: int


def read_compiled(model: keras.Model, *, forward: Forward | None = None) -> Compiled:
    """Checks and translates the arguments ``model`` was compiled with.

    Args:
        model: a model compiled in ``model_fn``.
        forward: ``FitOptions.forward``, which replaces the compiled loss (None: the loss is required).

    Raises:
        TrainingError: the model is not compiled, has no loss and no ``forward``
            was given, or was compiled with per-output losses or weighted metrics.
    """
    arguments: dict[str, Any] = compiled_arguments(model)
    for name in ("loss_weights", "weighted_metrics"):
        if arguments.get(name) is not None:
            raise TrainingError(
                f"model {model.name!r} was compiled with {name}={arguments[name]!r}, which toolkit.fit does not "
                "apply (its batches carry no sample weights and its loss is one per-example loss). Compile without "
                f"{name}, or weigh the examples inside a FitOptions(forward=...).", field=f"compile.{name}")
    loss, metrics = arguments.get("loss"), arguments.get("metrics") or []
    if forward is None and loss is None:
        raise TrainingError(f"model {model.name!r} was compiled without a loss and no FitOptions.forward was given. "
                            f"Compile it with one: {_EXAMPLE}.", field="loss")
    if isinstance(loss, (dict, list, tuple)):
        raise TrainingError(f"model {model.name!r} was compiled with loss={loss!r}: losses per output are not "
                            "supported by toolkit.fit. Compile with one loss, or pass FitOptions(forward=...) "
                            "that returns one per-example loss.", field="loss")
    if isinstance(metrics, dict):
        raise TrainingError(f"model {model.name!r} was compiled with metrics={metrics!r}: metrics per output are "
                            "not supported by toolkit.fit. Pass a list, e.g. metrics=['accuracy'].", field="metrics")
    if arguments.get("run_eagerly"):
        logger.warning("run_eagerly=True is ignored by toolkit.fit: the engine always traces its steps")
    if arguments.get("jit_compile") is True:
        logger.warning("jit_compile=True is not applied by toolkit.fit; training runs without XLA")
    steps = check_int(arguments.get("steps_per_execution", 1), field="steps_per_execution", error=TrainingError,
                      example=10)
    return Compiled(optimizer=arguments.get("optimizer") or "rmsprop", forward=forward or make_forward(loss),
                    metrics=resolve_metrics(list(metrics)), steps_per_execution=cast(int, steps))
