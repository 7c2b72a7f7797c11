"""``model_fn``\\ s for ``toolkit.fit`` in tests: build a model and compile it, as a user's model_fn does."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras

import models

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def compiled(build: Callable[..., keras.Model] | None = None, *, optimizer: Any = "adam", loss: Any = LOSS,
             metrics: Sequence[object] = ("accuracy",), steps_per_execution: int = 1,
             **build_args: Any) -> Callable[[], keras.Model]:
    """A model_fn: ``build(**build_args)`` (default ``models.digits_mlp``), compiled with these arguments.

    ``optimizer`` may be a callable returning an optimizer: each model gets its own.
    """

    def model_fn() -> keras.Model:
        model = (build or models.digits_mlp)(**build_args)
        made = optimizer() if callable(optimizer) and not isinstance(optimizer, keras.optimizers.Optimizer) \
            else optimizer
        model.compile(optimizer=made, loss=loss, metrics=list(metrics), steps_per_execution=steps_per_execution)
        return model

    return model_fn
