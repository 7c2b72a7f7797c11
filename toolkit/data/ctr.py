"""Synthetic click-through data shaped like Criteo's display-ads set: offline, deterministic, learnable.

Each example has 13 dense features (``log1p`` of exponential counts, as Criteo's integer
features are usually transformed) and 26 categorical ids. The ids follow a Zipf law (a few hot
ids, a long tail), so embedding lookups touch a realistic mix of hot and cold rows, and are
hashed per feature so each feature's hot ids differ. Labels are drawn from a hidden logistic
model over the ids and the dense features, the same hidden model for every seed: a train set and
a held-out set drawn with different seeds agree, and a model that learns gets its log loss well
below the base rate's (about 0.63; the click rate is about 20%).

The generator is the one TF1 click-through peers use for the same data, so a given
``(num_examples, vocab, seed, zipf)`` gives the same arrays here and there.

Example:
    >>> train = criteo_like(1024, vocab=1000, seed=1)
    >>> train.dense.shape, train.categorical.shape, train.labels.shape
    ((1024, 13), (1024, 26), (1024, 1))
    >>> dataset_fn = train.dataset_fn(512)
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tf_config.checks import check_int
from toolkit.data.pipeline import DataError, DatasetFn, make_dataset_fn

__all__ = ["CTR_CATEGORICAL", "CTR_DENSE", "CtrData", "criteo_like"]

CTR_DENSE, CTR_CATEGORICAL = 13, 26
_HIDDEN_SEED, _HIDDEN_BUCKETS, _LOGIT_SHIFT = 12345, 4096, -1.6


@dataclasses.dataclass(frozen=True, eq=False)
class CtrData:
    """In-memory click-through examples.

    Attributes:
        dense: float32 ``[n, 13]``.
        categorical: int64 ``[n, 26]``, feature ``f``'s ids in ``[0, vocab)``.
        labels: float32 ``[n, 1]``, 1.0 for a click.
        vocab: ids per categorical feature.
    """

    dense: np.ndarray
    categorical: np.ndarray
    labels: np.ndarray
    vocab: int

    @property
    def num_examples(self) -> int:
        return len(self.labels)

    @property
    def features(self) -> dict[str, np.ndarray]:
        """The model's input dict (``models.ctr`` takes these keys)."""
        return {"dense": self.dense, "categorical": self.categorical}

    def base_rate_logloss(self) -> float:
        """The log loss of always predicting the click rate: what a model must beat to have learned."""
        p = float(np.clip(self.labels.mean(), 1e-7, 1 - 1e-7))
        return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))

    def dataset_fn(self, global_batch_size: int, **options) -> DatasetFn:
        """A sharded ``dataset_fn`` of ``(features, labels)``; ``options`` are those of ``make_dataset_fn``."""
        features, labels = self.features, self.labels
        return make_dataset_fn(lambda: tf.data.Dataset.from_tensor_slices((features, labels)), global_batch_size,
                               **options)


def criteo_like(num_examples: int, *, vocab: int = 100_000, seed: int = 0, zipf: float = 1.2) -> CtrData:
    """Draws ``num_examples`` click-through examples; the same arguments give the same arrays.

    Args:
        num_examples: how many examples.
        vocab: ids per categorical feature (a model's tables have ``26 * vocab`` rows).
        seed: the draw; different seeds give disjoint-looking sets of one distribution (use one
            seed per worker for training and another for the held-out set).
        zipf: the Zipf exponent of the ids (> 1; larger is more skewed).

    Raises:
        DataError: a count that is not a positive integer, or ``zipf <= 1``.
    """
    check_int(num_examples, field="num_examples", error=DataError, example=100_000)
    check_int(vocab, field="vocab", error=DataError, example=100_000)
    if isinstance(zipf, bool) or not isinstance(zipf, (int, float)) or not zipf > 1:
        raise DataError(f"`zipf` is {zipf!r}; expected a number above 1 (the Zipf law's exponent). "
                        "Pass e.g. zipf=1.2.", field="zipf")
    rng = np.random.default_rng(seed)
    hidden = np.random.default_rng(_HIDDEN_SEED)  # one hidden model for every seed
    id_weight = hidden.normal(0.0, 0.6, size=(CTR_CATEGORICAL, _HIDDEN_BUCKETS)).astype(np.float32)
    dense_weight = hidden.normal(0.0, 0.4, size=(CTR_DENSE,)).astype(np.float32)
    dense = np.log1p(rng.exponential(3.0, size=(num_examples, CTR_DENSE))).astype(np.float32)
    ranks = (rng.zipf(zipf, size=(num_examples, CTR_CATEGORICAL)) - 1) % vocab
    categorical = ((ranks * 2654435761 + np.arange(CTR_CATEGORICAL) * 97) % vocab).astype(np.int64)
    logit = (id_weight[np.arange(CTR_CATEGORICAL), categorical % _HIDDEN_BUCKETS].sum(axis=1)
             + dense @ dense_weight + _LOGIT_SHIFT)
    labels = (rng.random(num_examples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)[:, None]
    return CtrData(dense=dense, categorical=categorical, labels=labels, vocab=vocab)
