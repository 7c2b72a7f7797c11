"""The compiled Keras optimizer's own maths, row-sparse, for sharded tables.

A model compiled with ``keras.optimizers.Adagrad(0.05)`` trains its sharded
tables with :class:`~toolkit.layers.SparseAdagrad` of the same learning rate and
settings: :func:`sparse_optimizer_for` translates the compiled optimizer, so
nobody has to pick a second one. Supported: ``Adagrad``, ``Adam``, ``Ftrl``
(the usual optimizer of the wide part) and ``SGD`` without momentum; every
other optimizer is refused with the tables it would have had to update.

Adam is **lazy** by default: a row's moments decay only in steps that look the
row up, and a row not looked up does not move. Keras' dense Adam decays both
moments of every row every step and moves every row whose first moment is not
zero, which rewrites whole tables and slots on each step; pass
``SparseAdam(lazy=False)`` (``FitOptions(train_step=functools.partial(ShardedTrainStep,
sparse_optimizer=SparseAdam(lazy=False)))``) for those exact maths, computed shard
by shard on each ps.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from strategies.sharding import ShardedTable, ShardingError
from toolkit.layers.sparse_optimizers import (
    SPARSE_OPTIMIZERS,
    SparseAdagrad,
    SparseAdam,
    SparseOptimizer,
    SparseSGD,
    _add_rows,
    _positive,
)

__all__ = ["SparseFtrl", "sparse_optimizer_for"]


class SparseFtrl(SparseOptimizer):
    """FTRL-Proximal with Keras' formulas and defaults, on the looked-up rows."""

    def __init__(self, learning_rate: float = 0.001, *, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, l2_shrinkage_regularization_strength: float = 0.0,
                 beta: float = 0.0, name: str = "sparse_ftrl") -> None:
        super().__init__(learning_rate, name=name)
        if learning_rate_power > 0:
            raise ShardingError(f"SparseFtrl `learning_rate_power` is {learning_rate_power!r}; expected a number "
                                "<= 0, e.g. -0.5.", field="learning_rate_power")
        self.learning_rate_power = float(learning_rate_power)
        self.initial_accumulator_value = _positive("initial_accumulator_value", initial_accumulator_value,
                                                   "SparseFtrl")
        self.l1, self.l2 = float(l1_regularization_strength), float(l2_regularization_strength)
        self.l2_shrinkage, self.beta = float(l2_shrinkage_regularization_strength), float(beta)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "learning_rate_power": self.learning_rate_power,
                "initial_accumulator_value": self.initial_accumulator_value,
                "l1_regularization_strength": self.l1, "l2_regularization_strength": self.l2,
                "l2_shrinkage_regularization_strength": self.l2_shrinkage, "beta": self.beta}

    def _slot_fills(self) -> Mapping[str, float]:
        return {"accumulator": self.initial_accumulator_value, "linear": 0.0}

    def _update_rows(self, shard, rows, grad, slots, step) -> None:
        accumulator, linear = slots["accumulator"], slots["linear"]
        lr, power = self.learning_rate, -self.learning_rate_power
        weights = tf.gather(shard, rows)
        accum = tf.gather(accumulator, rows)
        new_accum = accum + tf.square(grad)
        grad_to_use = grad + 2 * self.l2_shrinkage * weights
        _add_rows(linear, rows, grad_to_use - (tf.pow(new_accum, power) - tf.pow(accum, power)) / lr * weights)
        _add_rows(accumulator, rows, tf.square(grad))
        lin = tf.gather(linear, rows)  # after the add (ops on one variable run in program order)
        quadratic = tf.pow(new_accum, power) / lr + 2 * (self.l2 + self.beta / (2.0 * lr))
        new_weights = (tf.clip_by_value(lin, -self.l1, self.l1) - lin) / quadratic
        _add_rows(shard, rows, new_weights - weights)


_LEARNING_RATE_FIX = "Compile with a constant learning rate, or pass FitOptions(train_step=functools.partial(" \
                     "ShardedTrainStep, sparse_optimizer=...)) with a sparse optimizer of your own."


def _config(optimizer: Any, tables: Sequence[ShardedTable]) -> dict[str, Any]:
    config = dict(optimizer.get_config())
    what = _describe(optimizer, tables)
    if not isinstance(config.get("learning_rate"), (int, float)):
        raise ShardingError(f"{what}: its learning rate is a schedule, which the sparse update of the tables does not "
                            f"follow yet. {_LEARNING_RATE_FIX}", field="optimizer")
    for key in ("clipnorm", "clipvalue", "global_clipnorm"):
        if config.get(key) is not None:
            raise ShardingError(f"{what}: `{key}` is {config[key]!r}, and clipping over whole tables has no row-sparse "
                                f"form. Drop {key}, or clip the dense layers' gradients yourself.", field="optimizer")
    if config.get("use_ema"):
        raise ShardingError(f"{what}: use_ema=True would keep a dense moving average of every table. Drop use_ema.",
                            field="optimizer")
    return config


def _describe(optimizer: Any, tables: Sequence[ShardedTable]) -> str:
    sizes = ", ".join(f"{t.name!r} ({t.rows} x {t.dim})" for t in tables)
    return f"the compiled optimizer {type(optimizer).__name__} trains the sharded table(s) {sizes}"


def sparse_optimizer_for(optimizer: Any, tables: Sequence[ShardedTable] = ()) -> SparseOptimizer:
    """The row-sparse twin of the Keras ``optimizer`` a model was compiled with.

    Raises:
        ShardingError: an optimizer with no sparse form (names the tables, their sizes and the fix).
    """
    import keras

    config = _config(optimizer, tables)
    rate = float(config["learning_rate"])
    if isinstance(optimizer, keras.optimizers.Adagrad):
        return SparseAdagrad(rate, initial_accumulator_value=config["initial_accumulator_value"],
                             epsilon=config["epsilon"])
    if isinstance(optimizer, keras.optimizers.Adam) and not isinstance(optimizer, keras.optimizers.AdamW):
        if config.get("amsgrad"):
            raise ShardingError(f"{_describe(optimizer, tables)}: amsgrad=True has no row-sparse form here. Drop "
                                "amsgrad.", field="optimizer")
        return SparseAdam(rate, beta_1=config["beta_1"], beta_2=config["beta_2"], epsilon=config["epsilon"])
    if isinstance(optimizer, keras.optimizers.Ftrl):
        return SparseFtrl(rate, learning_rate_power=config["learning_rate_power"],
                          initial_accumulator_value=config["initial_accumulator_value"],
                          l1_regularization_strength=config["l1_regularization_strength"],
                          l2_regularization_strength=config["l2_regularization_strength"],
                          l2_shrinkage_regularization_strength=config["l2_shrinkage_regularization_strength"],
                          beta=config["beta"])
    if isinstance(optimizer, keras.optimizers.SGD) and not config.get("momentum"):
        return SparseSGD(rate)
    raise ShardingError((
        f"{_describe(optimizer, tables)}, but {type(optimizer).__name__}"
        f"{' with momentum' if isinstance(optimizer, keras.optimizers.SGD) else ''} has no row-sparse form: it "
        "would rewrite every row of the tables and their slots each step. Compile with keras.optimizers.Adagrad, "
        "Adam, Ftrl or SGD (no momentum), or pass FitOptions(train_step=functools.partial(ShardedTrainStep, "
        "sparse_optimizer=...))."), field="optimizer")


SPARSE_OPTIMIZERS["ftrl"] = SparseFtrl
