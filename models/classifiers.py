"""Small image classifiers for digits (8x8) and MNIST (28x28).

The builders return uncompiled Keras 3 models that end in a ``logits`` layer
(no softmax): pair them with a loss built with ``from_logits=True``. Layer names
are fixed (``conv_1``, ``dense_1``, ``logits``...) so that code mapping layers to
devices or comparing weights can rely on them. There is no training code here;
``toolkit.fit`` trains these under any strategy once a ``model_fn`` compiles them.

Example:
    >>> model = digits_mlp(seed=0)
    >>> model.output_shape
    (None, 10)
"""
from __future__ import annotations

from collections.abc import Sequence

import keras

from models._checks import check_positive

__all__ = ["digits_mlp", "digits_cnn", "mnist_cnn"]


def _check_shape(input_shape: Sequence[int], *, builder: str) -> tuple[int, ...]:
    shape = tuple(input_shape)
    if not shape or any(not isinstance(d, int) or d <= 0 for d in shape):
        raise ValueError(
            f"{builder}: `input_shape` must be a tuple of positive ints. "
            f"Received: input_shape={input_shape!r}. Pass e.g. (8, 8, 1)."
        )
    return shape


def _init(seed: int | None, offset: int) -> keras.initializers.Initializer:
    """Glorot-uniform, seeded per layer so two builds with one seed are identical."""
    return keras.initializers.GlorotUniform(seed=None if seed is None else seed + offset)


def digits_mlp(
    input_shape: Sequence[int] = (8, 8, 1),
    num_classes: int = 10,
    *,
    hidden_units: Sequence[int] = (64, 64),
    dropout: float = 0.0,
    seed: int | None = None,
) -> keras.Model:
    """A multilayer perceptron: the fastest model to train on digits.

    Args:
        input_shape: shape of one example (without the batch dimension).
        num_classes: number of output logits.
        hidden_units: width of each hidden ``dense_<i>`` layer.
        dropout: dropout rate after each hidden layer (0 disables it, which keeps
            training deterministic for tests).
        seed: makes the initial weights reproducible.
    """
    shape = _check_shape(input_shape, builder="digits_mlp")
    check_positive(num_classes, field="num_classes", owner="digits_mlp", example=10)
    for i, units in enumerate(hidden_units):
        check_positive(units, field=f"hidden_units[{i}]", owner="digits_mlp", fix="Pass e.g. hidden_units=(128, 64).")
    inputs = keras.Input(shape=shape, name="image")
    x = keras.layers.Flatten(name="flatten")(inputs)
    for i, units in enumerate(hidden_units, start=1):
        x = keras.layers.Dense(units, activation="relu", kernel_initializer=_init(seed, i), name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, seed=seed, name=f"dropout_{i}")(x)
    logits = keras.layers.Dense(num_classes, kernel_initializer=_init(seed, 0), name="logits")(x)
    return keras.Model(inputs, logits, name="digits_mlp")


def _small_cnn(
    input_shape: Sequence[int],
    num_classes: int,
    *,
    filters: Sequence[int],
    dense_units: int,
    seed: int | None,
    pool: bool,
    name: str,
) -> keras.Model:
    shape = _check_shape(input_shape, builder=name)
    check_positive(num_classes, field="num_classes", owner=name, example=10)
    check_positive(dense_units, field="dense_units", owner=name, example=64)
    inputs = keras.Input(shape=shape, name="image")
    x = inputs
    for i, width in enumerate(filters, start=1):
        x = keras.layers.Conv2D(
            width, 3, padding="same", activation="relu", kernel_initializer=_init(seed, 10 + i), name=f"conv_{i}"
        )(x)
        if pool:
            x = keras.layers.MaxPooling2D(2, name=f"pool_{i}")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", kernel_initializer=_init(seed, 1), name="dense_1")(x)
    logits = keras.layers.Dense(num_classes, kernel_initializer=_init(seed, 0), name="logits")(x)
    return keras.Model(inputs, logits, name=name)


def digits_cnn(
    input_shape: Sequence[int] = (8, 8, 1),
    num_classes: int = 10,
    *,
    filters: Sequence[int] = (16, 32),
    dense_units: int = 64,
    seed: int | None = None,
) -> keras.Model:
    """A two-convolution CNN sized for 8x8 digits; no pooling, the images are small already."""
    return _small_cnn(
        input_shape, num_classes, filters=filters, dense_units=dense_units, seed=seed, pool=False, name="digits_cnn"
    )


def mnist_cnn(
    input_shape: Sequence[int] = (28, 28, 1),
    num_classes: int = 10,
    *,
    filters: Sequence[int] = (32, 64),
    dense_units: int = 128,
    seed: int | None = None,
) -> keras.Model:
    """The classic MNIST CNN: conv/pool twice, then a dense layer and the logits."""
    return _small_cnn(
        input_shape, num_classes, filters=filters, dense_units=dense_units, seed=seed, pool=True, name="mnist_cnn"
    )
