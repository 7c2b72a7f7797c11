"""Offline-friendly datasets and correctly sharded ``dataset_fn`` builders.

Example:
    >>> from toolkit import data
    >>> train = data.load("digits", split="train")
    >>> dataset_fn = train.dataset_fn(global_batch_size=64, seed=1)
"""
from toolkit.data.ctr import CtrData, criteo_like
from toolkit.data.pipeline import DataError, DatasetFn, make_dataset_fn
from toolkit.data.sources import SPLITS, ArrayData, TfdsData, load, mock

__all__ = ["ArrayData", "CtrData", "DataError", "DatasetFn", "SPLITS", "TfdsData", "criteo_like", "load",
           "make_dataset_fn", "mock"]
