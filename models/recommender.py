"""A wide & deep recommender: the model that needs sharded embeddings.

Click-through style models have id spaces (users, items) in the millions, so
their embedding tables outgrow one machine long before their dense layers do.
This one scores a (user, item) pair:

* deep: user and item embeddings, their elementwise product, two ReLU layers;
* wide: a per-item bias, i.e. a one-column embedding of the item id.

Each table is built by the ``embedding`` layer class the caller passes:
``keras.layers.Embedding`` by default (a plain Keras model, like every builder
here), ``toolkit.layers.ShardedEmbedding`` to shard the tables across the ps
tasks or ``devices`` — which is what ``toolkit.layers.recommender`` does, so
this package depends on Keras only. The output is a logit (pair it with a
``from_logits=True`` loss). Layer names are fixed (``user_embedding``,
``item_embedding``, ``item_bias``, ``deep_1``...).

Example:
    >>> model = recommender(num_users=100, num_items=500)
    >>> features, labels = synthetic_interactions(256, num_users=100, num_items=500)
    >>> model(features).shape
    TensorShape([256, 1])
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from models._checks import check_positive

__all__ = ["recommender", "synthetic_interactions"]


def recommender(
    num_users: int = 100_000,
    num_items: int = 1_000_000,
    *,
    embedding_dim: int = 16,
    hidden_units: Sequence[int] = (64, 32),
    seed: int | None = None,
    embedding: Callable[..., keras.layers.Layer] | None = None,
    **embedding_options: Any,
) -> keras.Model:
    """Builds the (uncompiled) wide & deep model.

    Args:
        num_users, num_items: sizes of the id spaces.
        embedding_dim: width of the user and item vectors.
        hidden_units: widths of the ``deep_<i>`` ReLU layers.
        seed: seeds every initializer, so two builds are identical.
        embedding: the table layer, called as ``embedding(input_dim, output_dim,
            name=..., embeddings_initializer=..., **embedding_options)``;
            default ``keras.layers.Embedding``.
        embedding_options: more arguments for ``embedding``, e.g. the
            ``num_shards``, ``devices`` and ``partition`` of ``ShardedEmbedding``.

    Returns:
        A model taking ``{"user_id": int64[B], "item_id": int64[B]}`` and
        returning logits ``[B, 1]``.
    """
    for name, value in (("num_users", num_users), ("num_items", num_items), ("embedding_dim", embedding_dim)):
        check_positive(value, field=name, owner="recommender")
    for i, units in enumerate(hidden_units):
        check_positive(units, field=f"hidden_units[{i}]", owner="recommender", fix="Pass e.g. hidden_units=(64, 32).")

    def init(offset: int) -> keras.initializers.Initializer:
        return keras.initializers.RandomUniform(-0.05, 0.05, seed=None if seed is None else seed + offset)

    if embedding is None:
        if embedding_options:
            name = sorted(embedding_options)[0]
            raise ValueError(f"recommender: `{name}` is an option of the `embedding` layer, and keras.layers."
                             f"Embedding has none. Received: {name}={embedding_options[name]!r}. Pass "
                             "embedding=toolkit.layers.ShardedEmbedding (or call toolkit.layers.recommender).")
        embedding = keras.layers.Embedding
    user = keras.Input((), dtype="int64", name="user_id")
    item = keras.Input((), dtype="int64", name="item_id")
    user_vec = embedding(num_users, embedding_dim, name="user_embedding",
                         embeddings_initializer=init(0), **embedding_options)(user)
    item_vec = embedding(num_items, embedding_dim, name="item_embedding",
                         embeddings_initializer=init(1), **embedding_options)(item)
    wide = embedding(num_items, 1, name="item_bias", embeddings_initializer=keras.initializers.Zeros(),
                     **embedding_options)(item)
    x = keras.layers.Concatenate(name="features")(
        [user_vec, item_vec, keras.layers.Multiply(name="interaction")([user_vec, item_vec])])
    for i, units in enumerate(hidden_units, start=1):
        x = keras.layers.Dense(units, activation="relu", name=f"deep_{i}",
                               kernel_initializer=keras.initializers.GlorotUniform(
                                   seed=None if seed is None else seed + 10 + i))(x)
    deep = keras.layers.Dense(1, name="deep_logit")(x)
    logit = keras.layers.Add(name="logit")([deep, wide])
    return keras.Model({"user_id": user, "item_id": item}, logit, name="recommender")


def synthetic_interactions(
    num_examples: int,
    *,
    num_users: int,
    num_items: int,
    factors: int = 4,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Clicks drawn from hidden user/item factors: learnable, offline, reproducible.

    Item ids follow a long-tailed popularity (as in real catalogues), so a few
    rows of the item table are hot and most are cold.

    Returns:
        ``(features, labels)``: int64 ``user_id`` / ``item_id`` arrays and
        float32 labels of shape ``[num_examples, 1]``.
    """
    for name, value in (("num_examples", num_examples), ("num_users", num_users),
                        ("num_items", num_items), ("factors", factors)):
        check_positive(value, field=name, owner="synthetic_interactions")
    rng = np.random.default_rng(seed)
    user_factors = rng.normal(size=(num_users, factors)).astype(np.float32)
    item_factors = rng.normal(size=(num_items, factors)).astype(np.float32)
    users = rng.integers(0, num_users, num_examples)
    items = (rng.pareto(1.2, num_examples) * num_items / 20).astype(np.int64) % num_items
    affinity = np.sum(user_factors[users] * item_factors[items], axis=1)
    labels = (rng.random(num_examples) < 1 / (1 + np.exp(-2 * affinity))).astype(np.float32)
    return {"user_id": users.astype(np.int64), "item_id": items}, labels[:, None]
