"""Which optimizer a canned estimator trains with: a name, an instance, or a function returning one.

TF 2's canned estimators (``tf.estimator.DNNClassifier`` & co.) resolved an
optimizer *name* to a Keras optimizer with Keras' default learning rate (DNN),
or with a learning rate of their own (0.2 for linear models; 0.001 and
``min(0.005, 1/sqrt(#linear columns))`` for the two halves of a combined
model). The graph engine here trains with ``tf.compat.v1.train`` optimizers,
so each name maps to the v1 optimizer with Keras' hyper-parameters (Adam's and
RMSProp's epsilon 1e-7, Adagrad's and Ftrl's initial accumulator 0.1).

An instance of ``tf.compat.v1.train.Optimizer`` (e.g. ``AdamOptimizer(0.01)``,
``SyncReplicasOptimizer(...)``) is used as given; a callable is called inside
the graph, as TF did, so a learning-rate schedule may read the global step.
A Keras optimizer (what TF 2 code passes) of the five classes TF named is
translated to its v1 twin; any other Keras 2 optimizer (``tf_keras``,
including your own subclass) trains through its ``get_updates``, with the
global step as its ``iterations``, as TF 2 did; a Keras 3 optimizer of
another class trains as its ``tf_keras.optimizers.legacy`` twin. See
``_keras_optimizers``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._keras_optimizers import (
    V1_TWINS,
    KerasUpdates,
    from_keras,
    graph_keras_optimizer,
    is_keras_optimizer,
)

__all__ = ["DEFAULT_LEARNING_RATES", "OPTIMIZER_NAMES", "check_optimizer", "get_optimizer", "is_v1_optimizer"]


def _v1_twin(keras_class: str, learning_rate: float) -> Any:
    return V1_TWINS[keras_class]({"learning_rate": learning_rate})


# each name trains as the v1 twin of its Keras class, with Keras' hyper-parameters
OPTIMIZER_NAMES: dict[str, Callable[[float], Any]] = {
    name: functools.partial(_v1_twin, keras_class)
    for name, keras_class in (("Adagrad", "Adagrad"), ("Adam", "Adam"), ("Ftrl", "Ftrl"), ("RMSProp", "RMSprop"),
                              ("SGD", "SGD"))
}
# Keras' default learning rates: what TF 2's DNN estimators used for a bare name
DEFAULT_LEARNING_RATES: dict[str, float] = {"Adagrad": 0.001, "Adam": 0.001, "Ftrl": 0.001, "RMSProp": 0.001,
                                            "SGD": 0.01}


def is_v1_optimizer(value: Any) -> bool:
    return isinstance(value, tf.compat.v1.train.Optimizer)


def check_optimizer(field: str, value: Any) -> Any:
    """Refuses, at construction, what ``get_optimizer`` could never turn into an optimizer."""
    if isinstance(value, str):
        if value not in OPTIMIZER_NAMES:
            raise CannedError(f"`{field}` is {value!r}, which is not an optimizer name; expected one of "
                              f"{sorted(OPTIMIZER_NAMES)} (case matters), a tf.compat.v1.train.Optimizer, or a "
                              "function returning one.", field=field)
        return value
    if is_keras_optimizer(value):
        try:
            return from_keras(field, value)
        except CannedError:
            builder = graph_keras_optimizer(value)
            if builder is None:
                raise
            return builder
    if is_v1_optimizer(value) or callable(value):
        return value
    raise CannedError(f"`{field}` is {type(value).__name__} {value!r}; expected an optimizer name "
                      f"{sorted(OPTIMIZER_NAMES)}, a tf.compat.v1.train.Optimizer such as "
                      "tf.compat.v1.train.AdamOptimizer(0.01), a Keras Adagrad/Adam/Ftrl/RMSprop/SGD, or a "
                      "function returning one of those.", field=field)


def get_optimizer(field: str, value: Any, *, learning_rate: float | None) -> Any:
    """The optimizer to train with; call it inside the model_fn's graph.

    Args:
        field: the constructor argument it came from, for errors.
        value: a name, a v1 optimizer, or a function returning a v1 optimizer.
        learning_rate: used with a name; None means Keras' default for that name.
    """
    if isinstance(value, str):
        check_optimizer(field, value)
        rate = DEFAULT_LEARNING_RATES[value] if learning_rate is None else learning_rate
        return OPTIMIZER_NAMES[value](rate)
    if not is_v1_optimizer(value) and callable(value) and not is_keras_optimizer(value):
        value = value()
    if isinstance(value, KerasUpdates):
        return value
    if is_keras_optimizer(value) and callable(getattr(value, "get_updates", None)):
        return KerasUpdates(value)
    if is_keras_optimizer(value):
        raise CannedError(f"`{field}` returned the Keras optimizer {type(value).__name__} inside the graph, "
                          "where its settings cannot be read. Pass the Keras optimizer itself (not a function "
                          "returning it), or return a tf.compat.v1.train optimizer.", field=field)
    if not is_v1_optimizer(value):
        raise CannedError(f"`{field}` returned {type(value).__name__} {value!r}; expected a "
                          "tf.compat.v1.train.Optimizer such as tf.compat.v1.train.AdagradOptimizer(0.05).",
                          field=field)
    return value
