"""Keras 3 layers the stock library lacks for distributed training.

``ShardedEmbedding`` holds an embedding table sharded across devices or
parameter servers; the sparse optimizers and ``ShardedTrainStep`` (which ``toolkit.fit``
uses for such models) or ``make_train_step`` (for hand-written loops) train it
(Keras optimizers cannot), touching only the rows each batch looks up.
``recommender`` is ``models.recommender`` built on sharded tables. Once this package is
imported (``toolkit.fit`` and ``toolkit.enable_distributed_keras`` import it), a
``keras.layers.Embedding`` built under ParameterServerStrategy shards itself too.

Example:
    >>> from toolkit.layers import ShardedEmbedding, SparseAdam, make_train_step
"""
from toolkit.layers.embedding import ShardedEmbedding, sparse_training
from toolkit.layers.keras_embedding import shard_keras_embeddings
from toolkit.layers.keras_sparse import SparseFtrl, sparse_optimizer_for
from toolkit.layers.recommender import recommender
from toolkit.layers.sparse_optimizers import (
    SPARSE_OPTIMIZERS,
    SparseAdagrad,
    SparseAdam,
    SparseOptimizer,
    SparseSGD,
    make_sparse_optimizer,
)
from toolkit.layers.train_step import (
    ShardedTrainStep,
    has_sharded_tables,
    make_train_step,
    model_placement_report,
    sharded_tables,
)

__all__ = [
    "SPARSE_OPTIMIZERS",
    "ShardedEmbedding",
    "ShardedTrainStep",
    "SparseAdagrad",
    "SparseAdam",
    "SparseFtrl",
    "SparseOptimizer",
    "SparseSGD",
    "has_sharded_tables",
    "make_sparse_optimizer",
    "make_train_step",
    "model_placement_report",
    "recommender",
    "shard_keras_embeddings",
    "sharded_tables",
    "sparse_optimizer_for",
    "sparse_training",
]

# From here on, keras.layers.Embedding built under ParameterServerStrategy holds a sharded table
# (toolkit.layers.keras_embedding); ShardedTrainStep (registered by train_step) trains it.
shard_keras_embeddings()
