"""Installing tfdist's distribution_lib behind ``keras.distribution``, and what it hooks.

* ``set_distribution`` (and so ``Distribution.scope()``) checks the
  distribution first (``_plan``), then holds the scope of the strategy its
  batch axis maps to while it is set, so models built and trained meanwhile
  are that strategy's (Keras' trainer takes the strategy in scope when the
  model is created).
* ``Layer.add_weight`` splits a variable its ModelParallel layout splits.
* ``Optimizer.build`` refuses an optimizer that cannot update split
  variables, and a model built before its ModelParallel was set.
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

import keras
import tensorflow as tf

from strategies import make_strategy
from toolkit._compat import keras as _compat
from toolkit.keras_distribution import _cluster, _plan
from toolkit.keras_distribution._backend import FUNCTIONS
from toolkit.keras_distribution._errors import KerasDistributionError
from toolkit.keras_distribution._sharded import install_layer_hooks, shard_variables, weight_of_shard

__all__ = ["enable", "disable", "enabled", "current_plan"]

logger = logging.getLogger(__name__)

#: optimizers whose update of an element depends only on that element's gradient and slots
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Nadam", "Ftrl", "Lion")

_state: dict[str, Any] = {"plan": None}
_held: list[contextlib.AbstractContextManager[Any]] = []
_strategies: dict[tuple[Any, ...], tf.distribute.Strategy] = {}


def current_plan() -> _plan.Plan | None:
    return _state["plan"]


def _strategy(plan: _plan.Plan) -> tf.distribute.Strategy | None:
    if plan.strategy_kind is None:
        return None
    key = (plan.strategy_kind, plan.replica_devices, plan.reduce_to_one)
    if key not in _strategies:
        if plan.strategy_kind == "mirrored":
            _strategies[key] = make_strategy("mirrored", devices=list(plan.replica_devices),
                                             cross_device_ops="reduce_to_one" if plan.reduce_to_one else None)
        else:
            _strategies[key] = make_strategy("multi_worker_mirrored", tf_config=_cluster.cluster())
        logger.info("keras.distribution %s runs on %s over %s", type(plan.distribution).__name__,
                    type(_strategies[key]).__name__, ", ".join(plan.replica_devices))
    return _strategies[key]


def _release() -> None:
    while _held:
        _held.pop().__exit__(None, None, None)


def set_distribution(value: Any) -> None:
    """Keras' ``set_distribution``, checked and backed by a tf.distribute strategy (see the module docstring)."""
    plan = _plan.plan(value)  # refuses before anything changes
    strategy = None if plan is None else _strategy(plan)
    _release()
    _compat.original_set_distribution()(value)
    _state["plan"] = plan
    if strategy is not None:
        scope = strategy.scope()
        scope.__enter__()
        _held.append(scope)


def _bound(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    named = dict(kwargs)
    for name, value in zip(("shape", "initializer", "dtype"), args, strict=False):
        named[name] = value
    return named


def add_weight(layer: keras.layers.Layer, *args: Any, **kwargs: Any) -> Any:
    """``Layer.add_weight``, creating shards when the current ModelParallel layout splits the variable."""
    original = _compat.original_add_weight()
    plan = current_plan()
    named = _bound(args, kwargs)
    if plan is None or not plan.model_parallel or named.get("name") is None:
        return original(layer, *args, **kwargs)
    with keras.name_scope(layer.name, caller=layer):
        path = f"{_compat.current_name_path()}/{named['name']}"
    shape = tuple(int(d) for d in (named.get("shape") or ()))
    split = _plan.split_for(plan, path, shape)
    if split is None:
        return original(layer, *args, **kwargs)
    if named.get("constraint") is not None:
        raise KerasDistributionError(
            f"Variable {path!r} has a constraint and the layout {split.layout_key!r} splits it: a constraint "
            "applied to each shard alone is not the constraint of the whole variable. Drop the constraint or "
            "the split.", field=f"layout_map[{split.layout_key!r}]")
    dtype = keras.backend.standardize_dtype(named.get("dtype") or layer.variable_dtype)
    initializer = keras.initializers.get(named.get("initializer") or
                                         ("glorot_uniform" if "float" in dtype else "zeros"))
    rest = {k: v for k, v in named.items() if k not in ("shape", "initializer", "dtype", "name", "constraint")}

    def create(**shard: Any) -> Any:
        return original(layer, **shard, **rest)

    weight = shard_variables(split, create=create, shape=shape, dtype=dtype, initializer=initializer,
                             name=named["name"])
    install_layer_hooks(layer, named["name"], weight)
    logger.info("%s split along dimension %d over %s", path, split.dim, ", ".join(split.devices))
    return weight


def _elementwise(optimizer: keras.optimizers.Optimizer) -> str | None:
    """Why ``optimizer`` cannot update a split variable shard by shard (None: it can)."""
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        return _elementwise(inner)
    if getattr(optimizer, "clipnorm", None):
        return "its clipnorm clips each variable by that variable's norm, and a shard's norm is not the whole's"
    if not any(cls.__name__ in ELEMENTWISE and cls.__module__.startswith("keras")
               for cls in type(optimizer).__mro__):
        return (f"{type(optimizer).__name__} is not one of the optimizers that update each element from its own "
                f"gradient ({', '.join(ELEMENTWISE)}), so updating each shard alone may differ from updating "
                "the whole variable")
    return None


def _slots_beside_shards(optimizer: keras.optimizers.Optimizer) -> None:
    """Makes ``optimizer`` create each shard's slots on the shard's device (Keras would use the current one)."""
    original = optimizer.add_variable_from_reference
    if getattr(original, "_tfdist_beside_shards", False):
        return

    def add_variable_from_reference(reference_variable: Any, *args: Any, **kwargs: Any) -> Any:
        if weight_of_shard(reference_variable) is None or isinstance(reference_variable.value,
                                                                      tf.distribute.DistributedValues):
            # a mirrored shard: Keras' optimizer already colocates its slots with every copy
            return original(reference_variable, *args, **kwargs)
        with tf.device(reference_variable.value.device):
            return original(reference_variable, *args, **kwargs)

    add_variable_from_reference._tfdist_beside_shards = True  # type: ignore[attr-defined]
    optimizer.add_variable_from_reference = add_variable_from_reference


def _check_every_split_layout_used(plan: _plan.Plan, variables: Any) -> None:
    """A layout that would split a variable but matches none of the model's is refused, not ignored."""
    paths = []
    for variable in variables:
        weight = weight_of_shard(variable)
        path = weight.path if weight is not None else variable.path
        if path not in paths:
            paths.append(path)
    for key in _plan.splitting_keys(plan):
        if not any(key == path or re.fullmatch(key, path) for path in paths):
            raise KerasDistributionError(
                f"The layout {key!r} splits variables, but it matches none of the variables being trained: "
                f"{', '.join(paths)}. Layout keys are regular expressions matched against a variable's whole "
                f"path: write e.g. '.*{key.rsplit('/', 2)[-2] if key.count('/') else key}/kernel' or the full "
                "path, or remove the layout.", field=f"layout_map[{key!r}]")


def optimizer_build(optimizer: keras.optimizers.Optimizer, variables: Any) -> Any:
    plan = current_plan()
    if plan is not None and plan.model_parallel:
        _check_every_split_layout_used(plan, variables)
    for variable in variables:
        weight = weight_of_shard(variable)
        if weight is not None:
            _slots_beside_shards(optimizer)
            reason = _elementwise(optimizer)
            if reason is not None:
                raise KerasDistributionError(
                    f"Optimizer {type(optimizer).__name__} cannot update variable {weight.path!r}, which the "
                    f"layout {weight.split.layout_key!r} {weight.split.axes} splits over "
                    f"{len(weight.shards)} devices: {reason}. Use one of {', '.join(ELEMENTWISE)}, or keep the "
                    "variable whole.", field=f"layout_map[{weight.split.layout_key!r}]")
        elif plan is not None and plan.model_parallel and _plan.split_for(plan, variable.path,
                                                                          tuple(variable.shape)) is not None:
            raise KerasDistributionError(
                f"Variable {variable.path!r} is whole on {variable.value.device or 'this process'}, but the "
                "ModelParallel layout in effect splits it: the model was built before set_distribution. Call "
                "keras.distribution.set_distribution(...) first, then build the model.", field="model")
    return _compat.original_optimizer_build()(optimizer, variables)


def enable() -> None:
    if _compat.distribution_lib_installed():
        return
    _compat.install_distribution_lib(FUNCTIONS, set_distribution=set_distribution, add_weight=add_weight,
                                     optimizer_build=optimizer_build)
    current = keras.distribution.distribution()
    if current is not None:
        set_distribution(current)


def disable() -> None:
    _release()
    _state["plan"] = None
    if _compat.distribution_lib_installed():
        _compat.original_set_distribution()(None)
    _compat.uninstall_distribution_lib()
    _cluster.reset()


def enabled() -> bool:
    return _compat.distribution_lib_installed()
