"""Input pipelines that shard correctly under every strategy.

A *dataset_fn* takes a ``tf.distribute.InputContext`` and returns the batched
``tf.data.Dataset`` of one input pipeline. TensorFlow calls it once per pipeline
(once per worker under MultiWorkerMirroredStrategy and ParameterServerStrategy),
so the sharding decides which examples each worker sees. We shard *before*
shuffling: sharding after a seeded shuffle would still be disjoint, but sharding
first keeps it disjoint even when the seed or the shuffle buffer differs between
workers, and keeps the shards cheap to compute.
"""
from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from tf_config.checks import check_int
from tf_config.errors import FieldError

__all__ = ["DatasetFn", "make_dataset_fn", "DataError"]

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


class DataError(FieldError):
    """Bad input to the data layer; ``.field`` names the offending argument."""


def make_dataset_fn(
    build: Callable[[], tf.data.Dataset],
    global_batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = True,
    drop_remainder: bool = True,
    shuffle_buffer: int | None = None,
) -> DatasetFn:
    """Wraps an unbatched dataset factory into a sharded, batched ``dataset_fn``.

    Args:
        build: returns the unbatched examples in a fixed order. Called inside
            each input pipeline, so it must not depend on Python state that
            differs between workers.
        global_batch_size: examples per step over all replicas. Each pipeline
            batches ``input_context.get_per_replica_batch_size(global_batch_size)``.
        shuffle: shuffle each epoch (seeded, so every run sees the same order).
        seed: shuffle seed; the same seed gives the same order on every run,
            which is what makes a resumed run equal an uninterrupted one.
        repeat: repeat forever (training); ``False`` gives one pass (evaluation).
        drop_remainder: drop a final partial batch (training keeps steps uniform).
        shuffle_buffer: defaults to the dataset's size when known, else 10,000.

    Example:
        >>> fn = make_dataset_fn(lambda: tf.data.Dataset.range(10), 4)
        >>> next(iter(fn(tf.distribute.InputContext()))).shape
        TensorShape([4])
    """
    check_int(global_batch_size, field="global_batch_size", error=DataError,
              fix="Pass the number of examples per training step summed over all replicas, e.g. 64.")

    def dataset_fn(input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        context = input_context or tf.distribute.InputContext()
        ds = build()
        buffer = shuffle_buffer or _buffer_size(ds)
        if context.num_input_pipelines > 1:
            ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        if shuffle:
            ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
        per_replica = context.get_per_replica_batch_size(global_batch_size)
        return ds.batch(per_replica, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def _buffer_size(ds: tf.data.Dataset) -> int:
    """The whole (unsharded) dataset when its size is known: a perfect shuffle of any shard."""
    size = tf.get_static_value(ds.cardinality())
    return int(size) if size is not None and size > 0 else 10_000
