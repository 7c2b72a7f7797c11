"""TF 2 Estimator code passes Keras optimizers (``tf.keras.optimizers.Adam(0.01)``); the graph trains v1 ones.

``tf.keras`` is Keras 3 on TF 2.21 and its optimizers cannot update TF1 graph
variables. A Keras optimizer (Keras 3 or ``tf_keras``, plain or ``legacy``) of
one of the five classes TF's canned estimators named is therefore translated
to the ``tf.compat.v1.train`` optimizer with the same hyper-parameters; what
has no v1 counterpart (a learning-rate schedule object, weight decay,
clipping, EMA, AMSGrad) is refused with the v1 spelling to use instead.
"""
from __future__ import annotations

import logging
import numbers
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned._errors import CannedError

__all__ = ["V1_TWINS", "KerasUpdates", "from_keras", "graph_keras_optimizer", "is_keras_optimizer"]

logger = logging.getLogger(__name__)
_v1 = tf.compat.v1.train
# options that change training but have no v1 counterpart: the value that means "off"
_OFF = {"weight_decay": (None, 0, 0.0), "clipnorm": (None,), "clipvalue": (None,), "global_clipnorm": (None,),
        "use_ema": (False,), "amsgrad": (False,), "decay": (None, 0, 0.0), "loss_scale_factor": (None,),
        "gradient_accumulation_steps": (None,)}


def is_keras_optimizer(value: Any) -> bool:
    return callable(getattr(value, "get_config", None)) and (
        hasattr(value, "apply_gradients") and not isinstance(value, tf.compat.v1.train.Optimizer))


# the settings a Keras optimizer of the five classes keeps as public attributes, besides the learning rate
_PUBLIC_SETTINGS = ("beta_1", "beta_2", "epsilon", "rho", "momentum", "nesterov", "centered",
                    "initial_accumulator_value", "learning_rate_power", "l1_regularization_strength",
                    "l2_regularization_strength", "l2_shrinkage_regularization_strength", "beta", *_OFF)


def optimizer_config(field: str, optimizer: Any) -> dict[str, Any]:
    """``optimizer.get_config()``; for a Keras 2 optimizer made inside a TF1 graph (its learning rate is then
    a variable of that graph, which ``get_config`` cannot read outside eager mode), its public settings,
    with the learning rate variable's initial value."""
    try:
        return dict(optimizer.get_config())
    except NotImplementedError as exc:  # "numpy() is only available when eager execution is enabled."
        config = {k: getattr(optimizer, k) for k in _PUBLIC_SETTINGS if hasattr(optimizer, k)}
        rate = getattr(optimizer, "learning_rate", None)
        if isinstance(rate, tf.Variable):
            rate = tf.get_static_value(rate.initial_value)
            rate = None if rate is None else float(rate)
        if rate is None:
            raise CannedError(f"`{field}` is the Keras optimizer {type(optimizer).__name__} made inside a TF1 "
                              f"graph, whose learning rate cannot be read there ({exc}). Create it outside the "
                              "graph, or pass a tf.compat.v1.train optimizer.", field=field) from exc
        config["learning_rate"] = rate
        return config


def _adagrad(c: dict[str, Any]) -> Any:
    return _v1.AdagradOptimizer(c["learning_rate"], initial_accumulator_value=c.get("initial_accumulator_value", 0.1))


def _adam(c: dict[str, Any]) -> Any:
    return _v1.AdamOptimizer(c["learning_rate"], beta1=c.get("beta_1", 0.9), beta2=c.get("beta_2", 0.999),
                             epsilon=c.get("epsilon", 1e-7))


def _ftrl(c: dict[str, Any]) -> Any:
    return _v1.FtrlOptimizer(c["learning_rate"], learning_rate_power=c.get("learning_rate_power", -0.5),
                             initial_accumulator_value=c.get("initial_accumulator_value", 0.1),
                             l1_regularization_strength=c.get("l1_regularization_strength", 0.0),
                             l2_regularization_strength=c.get("l2_regularization_strength", 0.0),
                             l2_shrinkage_regularization_strength=c.get("l2_shrinkage_regularization_strength", 0.0),
                             beta=c.get("beta", 0.0))


def _rmsprop(c: dict[str, Any]) -> Any:
    return _v1.RMSPropOptimizer(c["learning_rate"], decay=c.get("rho", 0.9), momentum=c.get("momentum", 0.0),
                                epsilon=c.get("epsilon", 1e-7), centered=c.get("centered", False))


def _sgd(c: dict[str, Any]) -> Any:
    momentum = c.get("momentum", 0.0)
    if momentum:
        return _v1.MomentumOptimizer(c["learning_rate"], momentum, use_nesterov=c.get("nesterov", False))
    return _v1.GradientDescentOptimizer(c["learning_rate"])


V1_TWINS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Adagrad": _adagrad, "Adam": _adam, "Ftrl": _ftrl, "RMSprop": _rmsprop, "SGD": _sgd,
}


def from_keras(field: str, optimizer: Any) -> Callable[[], Any]:
    """A function building the v1 twin of a Keras optimizer in the current graph; refuses what has none."""
    name = type(optimizer).__name__
    builder = V1_TWINS.get(name)
    if builder is None:
        raise CannedError(f"`{field}` is the Keras optimizer {name}, which has no TF1 graph counterpart "
                          f"here (translated: {sorted(V1_TWINS)}). Pass a tf.compat.v1.train optimizer instead, "
                          "e.g. tf.compat.v1.train.AdamOptimizer(0.01).", field=field)
    config = optimizer_config(field, optimizer)
    config.setdefault("learning_rate", config.get("lr"))
    rate = config["learning_rate"]
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise CannedError(f"`{field}` is {name} with the learning rate {rate!r}; only a number translates "
                          "to a TF1 optimizer. For a schedule pass a function, e.g. lambda: "
                          f"tf.compat.v1.train.{builder(dict(config, learning_rate=0.1)).__class__.__name__}("
                          "tf.compat.v1.train.exponential_decay(0.1, tf.compat.v1.train.get_global_step(), "
                          "1000, 0.96)).",
                          field=field)
    config["learning_rate"] = float(rate)
    on = sorted(k for k, off in _OFF.items() if k in config and config[k] not in off)
    if on:
        raise CannedError(f"`{field}` is {name} with {', '.join(f'{k}={config[k]!r}' for k in on)}, which a "
                          "TF1 optimizer cannot do. Drop them, or pass a tf.compat.v1.train optimizer.", field=field)
    logger.info("%s: Keras %s(learning_rate=%g) trains as its tf.compat.v1.train twin", field, name, rate)
    return lambda: builder(config)


class KerasUpdates:
    """A Keras 2 optimizer trained through ``get_updates``, as TF 2's canned estimators trained any optimizer.

    With a global step the optimizer's ``iterations`` become the global step
    (TF's ``optimizer.iterations = get_or_create_global_step()``), so one
    update advances it.
    """

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer

    def minimize(self, loss: Any, global_step: Any = None, var_list: Any = None) -> Any:
        if global_step is not None:
            try:
                self.optimizer.iterations = global_step
            except RuntimeError:  # its iterations already exist (made before, or in another graph): a copy
                self.optimizer = _fresh(self.optimizer)
                self.optimizer.iterations = global_step
        variables = list(var_list) if var_list else tf.compat.v1.trainable_variables()
        return self.optimizer.get_updates(loss, variables)[0]


def _legacy_twin(optimizer: Any) -> Callable[[], Any] | None:
    """A builder of the ``tf_keras.optimizers.legacy`` optimizer of the same class and settings, or None."""
    import inspect

    import tf_keras
    cls = getattr(tf_keras.optimizers.legacy, type(optimizer).__name__, None)
    if cls is None:
        return None
    accepted = set(inspect.signature(cls.__init__).parameters) | {"clipnorm", "clipvalue", "global_clipnorm"}
    try:
        config = optimizer_config("optimizer", optimizer)
    except CannedError:
        return None
    dropped = {k: v for k, v in config.items() if k not in accepted}
    if any(k in _OFF and v not in _OFF[k] for k, v in dropped.items()):
        return None
    kept = {k: v for k, v in config.items() if k in accepted and v is not None}
    rate = kept.get("learning_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, numbers.Real)):
        return None
    return lambda: cls(**kept)


def _fresh(optimizer: Any) -> Any:
    """A new optimizer with the same settings, for one more graph (Keras 2 ties its variables to one graph).

    Each Estimator call builds a new graph; the optimizer's slots come back from
    the checkpoint by name. A class whose constructor cannot take its own
    config is used as given (then it trains in one graph only, as in TF).
    """
    try:
        return type(optimizer).from_config(optimizer.get_config())
    except (TypeError, ValueError):
        return optimizer


def graph_keras_optimizer(optimizer: Any) -> Callable[[], KerasUpdates] | None:
    """How a Keras optimizer of any class trains in a graph: its own ``get_updates`` (Keras 2), else its Keras 2 twin.

    None when it has neither: a Keras 3 class that Keras 2 lacks, or settings
    (weight decay, EMA, a schedule object) Keras 2's class cannot take.
    """
    if callable(getattr(optimizer, "get_updates", None)):
        built = [0]

        def build() -> KerasUpdates:
            """The caller's own optimizer in the first graph (TF's: its iterations become the global step)."""
            built[0] += 1
            return KerasUpdates(optimizer if built[0] == 1 else _fresh(optimizer))

        return build
    twin = _legacy_twin(optimizer)
    if twin is None:
        return None
    return lambda: KerasUpdates(twin())
