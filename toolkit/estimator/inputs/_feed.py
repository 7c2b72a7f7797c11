"""What ``numpy_input_fn`` and ``pandas_input_fn`` share: their errors, argument checks and the pipeline."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tf_config.errors import FieldError

__all__ = ["InputsError", "InputsTypeError", "batches", "check_feed_args", "unique_key"]


class InputsError(FieldError):
    """Bad input to ``numpy_input_fn`` / ``pandas_input_fn``; ``.field`` names the argument."""


class InputsTypeError(InputsError, TypeError):
    """An argument of the wrong type (where ``tf.estimator`` raised ``TypeError``)."""


def _count(field: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputsError(f"`{field}` is {value!r}; expected an integer >= 1"
                          f"{' or None (repeat forever)' if optional else ''}.", field=field)


def check_feed_args(*, batch_size: Any, num_epochs: Any, queue_capacity: Any, num_threads: Any) -> None:
    _count("batch_size", batch_size)
    _count("num_epochs", num_epochs, optional=True)
    _count("queue_capacity", queue_capacity)
    _count("num_threads", num_threads)


def unique_key(name: str, taken: Any) -> str:
    """``name``, with ``_n`` appended until no key in ``taken`` has it (how TF named the targets)."""
    while name in taken:
        name += "_n"
    return name


def batches(columns: Mapping[str, Any], split: Callable[[Any], Any], *, batch_size: int, num_epochs: int | None,
            shuffle: bool, queue_capacity: int) -> Any:
    """In a graph: ``split`` of the next batch's ``{column: tensor}``; eagerly: the ``tf.data.Dataset`` of those."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(dict(columns)).repeat(num_epochs)
    if shuffle:
        dataset = dataset.shuffle(queue_capacity)
    dataset = dataset.batch(batch_size, drop_remainder=False)
    if tf.executing_eagerly():
        return dataset.map(split)
    return split(tf.compat.v1.data.make_one_shot_iterator(dataset).get_next())
