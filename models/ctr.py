"""A wide & deep click-through model over Criteo-shaped inputs, written the way a Keras 3 user writes it.

Click-through models are what parameter servers exist for: their embedding tables (one row per
category value of every feature) outgrow one task long before the dense layers do. This model
is the TF1 ``DNNLinearCombinedClassifier`` / hand-written wide & deep of that workload:

* the 26 categorical ids are offset per feature (``id + feature * vocab``) into one table per
  part, so each part is a single ``26 * vocab``-row table;
* deep: ``Embedding(26 * vocab, 16)`` -> flatten -> concatenated with the 13 dense features ->
  256 ReLU -> 128 ReLU -> 1;
* wide: ``Embedding(26 * vocab, 1)`` summed over the features, plus a bias;
* the output is the sum of the two logits (pair it with a ``from_logits=True`` loss).

The tables are built by the ``embedding`` layer class the caller passes
(``keras.layers.Embedding`` by default; any layer called as
``embedding(input_dim, output_dim, name=..., embeddings_initializer=..., **options)``), so this
package depends on Keras only. Layer names are fixed (``deep_embedding``, ``wide_embedding``,
``hidden_1``, ``hidden_2``, ``deep_logit``, ``wide_logit``).

Example:
    >>> import numpy as np
    >>> model = ctr(vocab=50, seed=0)
    >>> features = {"dense": np.zeros((4, 13), "float32"), "categorical": np.zeros((4, 26), "int64")}
    >>> model(features).shape
    TensorShape([4, 1])
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras

from models._checks import check_positive

__all__ = ["CTR_CATEGORICAL", "CTR_DENSE", "FeatureOffsets", "WideSum", "ctr"]

CTR_DENSE, CTR_CATEGORICAL = 13, 26


@keras.saving.register_keras_serializable(package="tfdist_models")
class FeatureOffsets(keras.layers.Layer):
    """Maps feature ``f``'s id ``i`` (``0 <= i < vocab``) to row ``i + f * vocab`` of the shared table."""

    def __init__(self, vocab: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocab = vocab

    def call(self, ids: Any) -> Any:
        features = keras.ops.shape(ids)[-1]
        offsets = keras.ops.arange(features, dtype=ids.dtype) * keras.ops.cast(self.vocab, ids.dtype)
        return ids + offsets

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab": self.vocab}


@keras.saving.register_keras_serializable(package="tfdist_models")
class WideSum(keras.layers.Layer):
    """The wide part's logit: the per-feature weights ``[B, F, 1]`` summed, plus a learned bias."""

    def build(self, input_shape: Any) -> None:
        self.bias = self.add_weight(shape=(1,), initializer="zeros", name="bias")

    def call(self, weights: Any) -> Any:
        return keras.ops.sum(weights, axis=1) + self.bias


def ctr(
    vocab: int = 100_000,
    *,
    embedding_dim: int = 16,
    hidden_units: Sequence[int] = (256, 128),
    seed: int | None = None,
    embedding: Callable[..., keras.layers.Layer] | None = None,
    **embedding_options: Any,
) -> keras.Model:
    """Builds the (uncompiled) wide & deep click-through model.

    Args:
        vocab: ids per categorical feature; each table has ``26 * vocab`` rows.
        embedding_dim: width of the deep table's rows.
        hidden_units: widths of the ``hidden_<i>`` ReLU layers.
        seed: seeds every initializer, so two builds are identical.
        embedding: the table layer (default ``keras.layers.Embedding``), e.g.
            ``toolkit.layers.ShardedEmbedding``.
        embedding_options: more arguments for ``embedding`` (e.g. ``num_shards``).

    Returns:
        A model taking ``{"dense": float32[B, 13], "categorical": int64[B, 26]}``
        (ids in ``[0, vocab)``) and returning logits ``[B, 1]``.
    """
    for name, value in (("vocab", vocab), ("embedding_dim", embedding_dim)):
        check_positive(value, field=name, owner="ctr", example=100_000 if name == "vocab" else 16)
    for i, units in enumerate(hidden_units):
        check_positive(units, field=f"hidden_units[{i}]", owner="ctr", fix="Pass e.g. hidden_units=(256, 128).")
    if embedding is None:
        if embedding_options:
            name = sorted(embedding_options)[0]
            raise ValueError(f"ctr: `{name}` is an option of the `embedding` layer, and keras.layers.Embedding "
                             f"has none. Received: {name}={embedding_options[name]!r}. Pass e.g. "
                             "embedding=toolkit.layers.ShardedEmbedding, or drop the option.")
        embedding = keras.layers.Embedding

    def seeded(offset: int) -> int | None:
        return None if seed is None else seed + offset

    rows = CTR_CATEGORICAL * vocab
    dense = keras.Input((CTR_DENSE,), dtype="float32", name="dense")
    categorical = keras.Input((CTR_CATEGORICAL,), dtype="int64", name="categorical")
    ids = FeatureOffsets(vocab, name="feature_offsets")(categorical)
    deep_rows = embedding(rows, embedding_dim, name="deep_embedding",
                          embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.01, seed=seeded(0)),
                          **embedding_options)(ids)
    x = keras.layers.Concatenate(name="deep_input")(
        [keras.layers.Reshape((CTR_CATEGORICAL * embedding_dim,), name="deep_flat")(deep_rows), dense])
    for i, units in enumerate(hidden_units, start=1):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden_{i}",
                               kernel_initializer=keras.initializers.GlorotUniform(seed=seeded(10 + i)))(x)
    deep = keras.layers.Dense(1, name="deep_logit",
                              kernel_initializer=keras.initializers.GlorotUniform(seed=seeded(20)))(x)
    wide_rows = embedding(rows, 1, name="wide_embedding", embeddings_initializer=keras.initializers.Zeros(),
                          **embedding_options)(ids)
    wide = WideSum(name="wide_logit")(wide_rows)
    logit = keras.layers.Add(name="logit")([deep, wide])
    return keras.Model({"dense": dense, "categorical": categorical}, logit, name="ctr")
