"""``keras.layers.Embedding`` shards itself under parameter servers.

A Keras user's ``keras.layers.Embedding(26 * 100_000, 16)`` built under a
``ParameterServerStrategy`` would be one variable on one ps, read whole by each
step's forward pass, with a dense Keras optimizer update of the whole table and
its slots. Once :func:`shard_keras_embeddings` ran (``toolkit.fit`` and
``enable_distributed_keras`` call it), an ``Embedding`` built under
``ParameterServerStrategy`` holds a :class:`~strategies.sharding.ShardedTable`
instead of its ``embeddings`` weight:

* tables of at least ``strategies.sharding.AUTO_SHARD_BYTES`` (1 MiB) are split
  into one shard per ps, smaller ones stay whole on one ps (the dense layers are
  never split);
* lookups fetch only the rows of the batch's distinct ids, from their shards;
* the engine's ``ShardedTrainStep`` updates the looked-up rows with the compiled
  optimizer's own maths (``toolkit.layers.keras_sparse``);
* Keras weight files and ``.keras`` archives hold the whole table as Keras'
  ``Embedding`` does (it is gathered from the shards), so a model saved here loads
  into a plain Keras model.

Layers that Keras builds differently are left as they are: subclasses of
``Embedding``, quantized or LoRA layers, and tables with a regularizer or a
constraint (which need the whole table each step).
"""
from __future__ import annotations

import logging
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from strategies._compat import replace_method
from strategies.sharding import ShardedTable, ShardLayout, has_shard_source
from toolkit._compat.keras import wrap_embedding_build

__all__ = ["SHARDED_TABLE", "is_sharded_keras_embedding", "shard_keras_embeddings"]

logger = logging.getLogger(__name__)

#: the attribute of a Keras ``Embedding`` that holds its sharded table
SHARDED_TABLE = "sharded_table"


def _shards_here(layer: keras.layers.Embedding) -> bool:
    if type(layer) is not keras.layers.Embedding:
        return False
    if has_shard_source(layer.name):  # a between-graph worker, building on the chief's tables
        return True
    if not tf.distribute.has_strategy():
        return False
    if not isinstance(tf.distribute.get_strategy(), tf.distribute.ParameterServerStrategy):
        return False
    kept = [what for what, value in (("quantization", getattr(layer, "quantization_mode", None)),
                                     ("LoRA", getattr(layer, "lora_rank", None)),
                                     ("a regularizer", layer.embeddings_regularizer),
                                     ("a constraint", layer.embeddings_constraint)) if value]
    if kept:
        logger.warning("Embedding %r (%d x %d) has %s, so it stays one Keras variable on one ps with dense "
                       "updates; drop it to have the table sharded with row-sparse updates", layer.name,
                       layer.input_dim, layer.output_dim, " and ".join(kept))
        return False
    return True


def _lookup(layer: keras.layers.Embedding) -> Any:
    def call(inputs: Any) -> Any:
        table: ShardedTable = getattr(layer, SHARDED_TABLE)
        return keras.ops.cast(table.lookup(inputs), layer.compute_dtype)

    return call


def _save(layer: keras.layers.Embedding) -> Any:
    def save_own_variables(store: Any) -> None:  # Keras' Embedding format: the whole table, gathered
        store["0"] = getattr(layer, SHARDED_TABLE).to_numpy()

    return save_own_variables


def _load(layer: keras.layers.Embedding) -> Any:
    def load_own_variables(store: Any) -> None:
        table: ShardedTable = getattr(layer, SHARDED_TABLE)
        table.assign_from([np.asarray(store["0"])], layout=ShardLayout("div", table.rows, 1))

    return load_own_variables


def _build(original_build: Any, layer: keras.layers.Embedding, input_shape: Any = None) -> None:
    if layer.built or not _shards_here(layer):
        return original_build(layer, input_shape)
    table = ShardedTable.create(layer.name, layer.input_dim, layer.output_dim,
                                initializer=layer.embeddings_initializer, dtype=layer.variable_dtype)
    setattr(layer, SHARDED_TABLE, table)  # tracked: checkpoints save it shard by shard
    replace_method(layer, "call", _lookup(layer))
    replace_method(layer, "save_own_variables", _save(layer))
    replace_method(layer, "load_own_variables", _load(layer))
    layer.built = True
    return None


def is_sharded_keras_embedding(layer: Any) -> bool:
    """True for a Keras ``Embedding`` that holds a sharded table (built under parameter servers)."""
    return isinstance(layer, keras.layers.Embedding) and getattr(layer, SHARDED_TABLE, None) is not None


def shard_keras_embeddings() -> None:
    """From now on, ``keras.layers.Embedding`` layers built under ParameterServerStrategy shard themselves."""
    wrap_embedding_build(_build)
