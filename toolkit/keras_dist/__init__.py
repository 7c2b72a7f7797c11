"""Keras 3's own ``model.fit`` under ParameterServerStrategy and MultiWorkerMirroredStrategy.

Keras 3 cannot train under the multi-worker strategies on TF 2.21
(keras-team/keras#20585). After one call to ``enable_distributed_keras()``,
a model compiled inside the ``scope()`` of one of them trains, evaluates and
predicts through tfdist's engine (the one behind ``toolkit.fit``) when its
``fit``/``evaluate``/``predict`` is called. Every other model, including
models under MirroredStrategy or no strategy, runs Keras' own code, untouched.

Example:
    >>> import keras, toolkit                              # doctest: +SKIP
    >>> from strategies import make_strategy, run_role  # doctest: +SKIP
    >>> run_role()                 # parameter-server ps/worker tasks serve here  # doctest: +SKIP
    >>> toolkit.enable_distributed_keras()  # doctest: +SKIP
    >>> strategy = make_strategy()  # doctest: +SKIP
    >>> with strategy.scope():  # doctest: +SKIP
    ...     model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    ...     model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    >>> model.fit(dataset, epochs=3, steps_per_epoch=70)  # doctest: +SKIP
"""
from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from toolkit._compat import keras as _compat
from toolkit.keras_dist._fit import (
    distributed_evaluate,
    distributed_fit,
    distributed_predict,
    forget,
)
from toolkit.training import TrainingError
from toolkit.training.compiled import CompileRecord, record_compile

__all__ = ["enable_distributed_keras", "disable_distributed_keras", "distributed_keras_enabled"]

logger = logging.getLogger(__name__)

_MULTI_WORKER = (tf.distribute.ParameterServerStrategy, tf.distribute.MultiWorkerMirroredStrategy)
_records: weakref.WeakKeyDictionary[keras.Model, CompileRecord] = weakref.WeakKeyDictionary()


def _current_multi_worker() -> tf.distribute.Strategy | None:
    if not tf.distribute.has_strategy():
        return None
    strategy = tf.distribute.get_strategy()
    return strategy if isinstance(strategy, _MULTI_WORKER) else None


def _placed_by_strategy(model: keras.Model, variable: keras.Variable) -> bool:
    """Whether a Keras variable was created by a multi-worker strategy (mirrored, or on a ps).

    A variable on a ps counts only when the model was created under a strategy: a model
    placed on ps devices by hand (a device map or a ModelParallel mesh over an in-graph
    session) trains with Keras' own fit.
    """
    value = getattr(variable, "value", variable)
    if isinstance(value, tf.distribute.DistributedValues):
        return isinstance(getattr(value, "distribute_strategy", None), _MULTI_WORKER)
    created_under = getattr(model, "distribute_strategy", None)
    return "/job:ps" in str(getattr(value, "device", "")) and isinstance(created_under, _MULTI_WORKER)


def _in_scope(strategy: tf.distribute.Strategy, variable: keras.Variable) -> bool:
    value = getattr(variable, "value", variable)
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return "/job:ps" in str(getattr(value, "device", ""))
    return bool(strategy.extended.variable_created_in_scope(value))


def _check_model(model: keras.Model, strategy: tf.distribute.Strategy) -> None:
    if not _compat.uses_base_train_step(model):
        raise TrainingError(
            f"Model {model.name!r} ({type(model).__name__}) overrides train_step, which tfdist's engine does not "
            f"run under {type(strategy).__name__}. Move the custom logic into the model's call() or a loss, or "
            "train it with toolkit.fit(..., forward=...).", field="model")
    outside = [v for v in model.weights if not _in_scope(strategy, v)]
    if outside:
        raise TrainingError(
            f"Model {model.name!r} was built outside strategy.scope(): its variable {outside[0].path!r} lives on "
            f"{getattr(outside[0].value, 'device', '?') or 'this process'} instead of where "
            f"{type(strategy).__name__} puts variables. Create (and build) the model inside "
            "`with strategy.scope():`, then compile it there.", field="model")


def _compile(base: Callable[..., Any], model: keras.Model, *args: Any, **kwargs: Any) -> Any:
    strategy = _current_multi_worker()
    if strategy is None:
        _records.pop(model, None)
        return base(model, *args, **kwargs)
    arguments = inspect.signature(base).bind(model, *args, **kwargs).arguments
    arguments.pop("self", None)
    _check_model(model, strategy)
    record = record_compile(strategy, **arguments)  # refuses bad arguments before anything changes
    result = base(model, *args, **kwargs)
    _records[model] = record
    forget(model)
    logger.info("model %r compiled under %s: fit/evaluate/predict run on tfdist's engine", model.name,
                type(strategy).__name__)
    return result


def _record(model: keras.Model, method: str) -> CompileRecord | None:
    record = _records.get(model)
    if record is not None:
        return record
    if _current_multi_worker() is not None or any(_placed_by_strategy(model, v) for v in model.weights):
        raise TrainingError(
            f"model.{method}() of model {model.name!r}, whose variables belong to a ParameterServerStrategy or "
            "MultiWorkerMirroredStrategy, but the model was not compiled inside that strategy's scope after "
            "toolkit.enable_distributed_keras(). Call toolkit.enable_distributed_keras() first, then build and "
            "compile the model inside `with strategy.scope():`.", field="model")
    return None


def _dispatch(method: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    def run(base: Callable[..., Any], model: keras.Model, *args: Any, **kwargs: Any) -> Any:
        record = _record(model, method)
        if record is None:
            return base(model, *args, **kwargs)
        return handler(model, record, *args, **kwargs)

    return run


def enable_distributed_keras() -> None:
    """Routes ``fit``/``evaluate``/``predict`` of models compiled under PS or MWMS to tfdist's engine.

    Call it once, before building and compiling the model; calling it again
    does nothing. Models compiled outside those strategies keep Keras' own
    behaviour. ``disable_distributed_keras()`` undoes it.
    """
    if _compat.installed():
        return
    _compat.install({"compile": _compile, "fit": _dispatch("fit", distributed_fit),
                     "evaluate": _dispatch("evaluate", distributed_evaluate),
                     "predict": _dispatch("predict", distributed_predict)})
    logger.info("distributed Keras enabled: models compiled under ParameterServerStrategy or "
                "MultiWorkerMirroredStrategy train on tfdist's engine")


def disable_distributed_keras() -> None:
    """Restores Keras' own ``compile``/``fit``/``evaluate``/``predict``; idempotent."""
    _compat.uninstall()
    _records.clear()


def distributed_keras_enabled() -> bool:
    """Whether ``enable_distributed_keras()`` is in effect."""
    return _compat.installed()
