"""Keras 3 layers the stock library lacks for distributed training.

``ShardedEmbedding`` holds an embedding table sharded across devices or
parameter servers; the sparse optimizers and ``make_train_step`` train it
(Keras optimizers cannot), touching only the rows each batch looks up.

Example:
    >>> from toolkit.layers import ShardedEmbedding, SparseAdam, make_train_step  # doctest: +SKIP
"""
from toolkit.layers.embedding import ShardedEmbedding, sparse_training
from toolkit.layers.sparse_optimizers import (
    SPARSE_OPTIMIZERS,
    SparseAdagrad,
    SparseAdam,
    SparseOptimizer,
    SparseSGD,
    make_sparse_optimizer,
)
from toolkit.layers.train_step import make_train_step, model_placement_report, sharded_tables

__all__ = [
    "SPARSE_OPTIMIZERS",
    "ShardedEmbedding",
    "SparseAdagrad",
    "SparseAdam",
    "SparseOptimizer",
    "SparseSGD",
    "make_sparse_optimizer",
    "make_train_step",
    "model_placement_report",
    "sharded_tables",
    "sparse_training",
]
