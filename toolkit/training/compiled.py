"""``model.compile``'s arguments, translated once into what the engine runs, for both front doors.

Keras' ``model.fit`` (``toolkit.enable_distributed_keras``) records them as
``compile`` is called; ``toolkit.fit`` reads them from the model its
``model_fn`` builds and compiles, as TensorFlow's distributed tutorials write
it::

    def model_fn():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy", keras.metrics.AUC()], steps_per_execution=10)
        return model

Every task that builds the model (the chief, each between-graph worker, the
evaluator) reads the same arguments from its own copy. The engine's step takes
a ``Forward`` (per-example loss), a dict of metrics and an optimizer spec; here
the Keras arguments become those, and anything the engine cannot run the way
Keras would is refused with the argument's name. Batches reach the forward
pass as ``(features, labels)``, or as ``(features, (labels, weights))`` when
Keras' input carries sample or class weights.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import keras
import tensorflow as tf

from tf_config.checks import check_int
from toolkit.training.config import TrainingError
from toolkit.training.metrics import EngineMetric, engine_metrics, same_rank, split_labels
from toolkit.training.state import OptimizerSpec, compiled_arguments
from toolkit.training.step import Forward, MetricFn, Nest, _per_example, _unreduced_loss

__all__ = ["CompileRecord", "read_compiled", "record_compile"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    """What one ``compile`` asked for, as the engine runs it.

    Attributes:
        strategy: the strategy whose scope the model was compiled in (None: a between-graph worker's graph).
        optimizer: the optimizer argument (name, instance or schedule-carrying
            instance; re-created under the strategy's scope from its config).
        loss: the per-example loss function (None when ``custom_forward`` replaces it).
        metrics: the engine's ``{name: metric}``.
        steps_per_execution: steps per traced call (Keras' meaning; Keras' default is 1).
        jit_compile: compile the forward pass with XLA (never under parameter servers).
        custom_forward: ``FitOptions.forward``, which replaces the loss (``toolkit.fit`` only).
    """

    strategy: tf.distribute.Strategy | None
    optimizer: OptimizerSpec
    loss: MetricFn | None
    metrics: dict[str, EngineMetric]
    steps_per_execution: int
    jit_compile: bool
    custom_forward: Forward | None = None

    def forward(self) -> Forward:
        """``(model, features, labels, training) -> (weighted per-example loss, predictions)``."""
        if self.custom_forward is not None:
            return self.custom_forward
        loss_fn = self.loss
        assert loss_fn is not None  # record_compile refuses a missing loss without a custom forward
        call: Callable[[Nest, bool], Nest] | None = None

        def forward(model: keras.Model, features: Nest, labels: Nest, training: bool) -> tuple[tf.Tensor, Nest]:
            nonlocal call
            y_true, weights = split_labels(labels)
            if self.jit_compile:
                if call is None:
                    call = tf.function(lambda x, t: model(x, training=t), jit_compile=True)
                predictions = call(features, training)
            else:
                predictions = model(features, training=training)
            per_example = _per_example(loss_fn(same_rank(y_true, predictions), predictions), what="loss")
            if weights is None:
                return per_example, predictions
            return per_example * tf.reshape(tf.cast(weights, tf.float32), [-1]), predictions

        return forward


def _loss(loss: Any, loss_weights: Any, *, required: bool) -> MetricFn | None:
    if loss is None:
        if not required:
            return None
        raise TrainingError("`loss` is None: compile the model with a loss before fit, e.g. "
                            "model.compile(loss='sparse_categorical_crossentropy', ...), or give toolkit.fit a "
                            "FitOptions(forward=...).", field="loss")
    if isinstance(loss, (dict, list, tuple)) or loss_weights is not None:
        raise TrainingError(
            f"`loss` is {loss!r} (loss_weights={loss_weights!r}): losses per output are not supported by tfdist's "
            "engine yet. Pass one loss for a one-output model.",
            field="loss")
    return _unreduced_loss(loss)


def _jit(value: object, parameter_servers: bool) -> bool:
    if value is True and parameter_servers:
        logger.warning("jit_compile=True is not applied under ParameterServerStrategy: XLA cannot read the "
                       "variables on the parameter servers; training runs without XLA")
        return False
    return value is True


def record_compile(strategy: tf.distribute.Strategy | None, *, optimizer: OptimizerSpec = "rmsprop",
                   loss: Any = None, loss_weights: Any = None, metrics: Sequence[object] | None = None,
                   weighted_metrics: Sequence[object] | None = None,
                   run_eagerly: bool = False, steps_per_execution: int | str = 1, jit_compile: bool | str = "auto",
                   auto_scale_loss: bool = True, custom_forward: Forward | None = None,
                   packed: bool = True) -> CompileRecord:
    """Checks and translates ``model.compile(...)``'s arguments (same names and defaults as Keras).

    ``strategy`` None: parameter servers (a between-graph worker's graph). ``packed``: whether the labels
    may carry sample weights (Keras' ``model.fit``; ``toolkit.fit``'s never do).
    """
    if run_eagerly:
        logger.warning("run_eagerly=True is ignored under %s: the engine always traces its steps",
                       type(strategy).__name__)
    parameter_servers = strategy is None or isinstance(strategy, tf.distribute.ParameterServerStrategy)
    return CompileRecord(strategy=strategy, optimizer=optimizer,
                         loss=_loss(loss, loss_weights, required=custom_forward is None),
                         metrics=engine_metrics(metrics, weighted_metrics, packed=packed),
                         steps_per_execution=cast(int, check_int(steps_per_execution, field="steps_per_execution",
                                                                 error=TrainingError, example=10)),
                         jit_compile=_jit(jit_compile, parameter_servers), custom_forward=custom_forward)


def read_compiled(model: keras.Model, strategy: tf.distribute.Strategy | None, *,
                  forward: Forward | None = None) -> CompileRecord:
    """``toolkit.fit``'s translation: the arguments ``model`` was compiled with in ``model_fn``.

    Args:
        model: a model compiled in ``model_fn``.
        strategy: the strategy it was built under (None: a between-graph worker's graph).
        forward: ``FitOptions.forward``, which replaces the compiled loss (None: the loss is required).

    Raises:
        TrainingError: the model is not compiled, or an argument the engine cannot run as Keras would.
    """
    return record_compile(strategy, **compiled_arguments(model), custom_forward=forward, packed=False)
