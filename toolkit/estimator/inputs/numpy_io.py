"""``numpy_input_fn``: ``tf.compat.v1.estimator.inputs.numpy_input_fn`` on ``tf.data``.

TF1 fed the arrays through a queue filled by Python threads; here the same
batches come from a ``tf.data`` pipeline: ``num_epochs`` passes over the rows
(None: forever), shuffled through a buffer of ``queue_capacity`` rows when
``shuffle`` is True (across epoch boundaries, as TF's shuffling queue mixed
them), in batches of ``batch_size``. With ``num_epochs`` set, the last batch
may be smaller (TF's ``dequeue_up_to``); with None every batch is full.

In a graph (inside ``Estimator``) ``input_fn()`` returns tensors, as TF did;
called eagerly it returns the ``tf.data.Dataset`` of the same elements.

Example:
    >>> import numpy as np
    >>> input_fn = numpy_input_fn({"age": np.arange(4.0)}, np.arange(-4, 0), batch_size=2, shuffle=False)
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from toolkit.estimator.inputs._feed import InputsError, InputsTypeError, batches, check_feed_args, unique_key

__all__ = ["numpy_input_fn"]

_TARGET_KEY = "__target_key__"
_DIRECT_KEY = "__direct_np_input__"


def _features(x: Any) -> collections.OrderedDict[str, Any]:
    if isinstance(x, dict):
        if not x:
            raise InputsError("x cannot be an empty dict: numpy_input_fn `x` is {}; pass {feature name: "
                              "array}, or one array.", field="x")
        return collections.OrderedDict(sorted(x.items(), key=lambda item: item[0]))
    if isinstance(x, np.ndarray):
        if x.size == 0:
            raise InputsError(f"x cannot be an empty array: numpy_input_fn `x` has shape {x.shape}; pass the "
                              "rows to feed.", field="x")
        return collections.OrderedDict({_DIRECT_KEY: x})
    raise InputsTypeError(f"x must be a dict or array; got {type(x).__name__}. numpy_input_fn `x` should be a "
                          "NumPy array or {feature name: array}; convert lists with np.asarray.", field="x")


def numpy_input_fn(x: Any, y: Any = None, batch_size: int = 128, num_epochs: int | None = 1,
                   shuffle: bool | None = None, queue_capacity: int = 1000,
                   num_threads: int = 1) -> Callable[[], Any]:
    """An ``input_fn`` feeding ``x`` (an array or dict of arrays) and ``y`` in batches.

    Args:
        x: a NumPy array (one feature) or ``{name: array}``; every array has one row per example.
        y: the targets: an array, ``{name: array}``, or None.
        batch_size: rows per batch.
        num_epochs: passes over the data; None repeats forever.
        shuffle: must be given, True or False (True for training).
        queue_capacity: the shuffle buffer, in rows.
        num_threads: accepted for TF's signature; tf.data reads in order, so it changes nothing.

    Returns:
        ``input_fn()`` -> ``features`` or ``(features, targets)``.

    Raises:
        InputsError (ValueError): shuffle not a bool, an empty ``x``/``y``, keys in both
            ``x`` and ``y``, arrays of different lengths.
        InputsTypeError (TypeError): ``x`` neither a dict nor an array.
    """
    if not isinstance(shuffle, bool):
        raise InputsError(f"shuffle must be provided and explicitly set as boolean (it is recommended to set it "
                          f"as True for training); got {shuffle}. Pass shuffle=True or shuffle=False.",
                          field="shuffle")
    check_feed_args(batch_size=batch_size, num_epochs=num_epochs, queue_capacity=queue_capacity,
                    num_threads=num_threads)

    def input_fn() -> Any:
        data = _features(x)
        feature_keys = list(data)
        target_keys: Any
        if y is None:
            target_keys = None
        elif isinstance(y, dict):
            if not y:
                raise InputsError("y cannot be empty dict, use None instead: numpy_input_fn `y` is {}.",
                                  field="y")
            ordered_y = collections.OrderedDict(sorted(y.items(), key=lambda item: item[0]))
            target_keys = list(ordered_y)
            duplicates = set(feature_keys) & set(target_keys)
            if duplicates:
                raise InputsError(f"{len(duplicates)} duplicate keys are found in both x and y: {duplicates}. "
                                  "Rename the targets.", field="y")
            data.update(ordered_y)
        else:
            target_keys = unique_key(_TARGET_KEY, data)
            data[target_keys] = y
        lengths = {np.shape(v)[0] if np.ndim(v) else None for v in data.values()}
        if len(lengths) != 1:
            x_shapes = {k: np.shape(data[k]) for k in feature_keys}
            if target_keys is None:
                y_shapes = None
            elif isinstance(target_keys, str):
                y_shapes = np.shape(y)
            else:
                y_shapes = {k: np.shape(data[k]) for k in target_keys}
            raise InputsError(f"Length of tensors in x and y is mismatched. All elements in x and y must have "
                              f"the same length.\nShapes in x: {x_shapes}\nShapes in y: {y_shapes}\nGive every "
                              "array one row per example.", field="y")
        return batches({k: np.asarray(v) for k, v in data.items()},
                       lambda batch: _split(batch, x, feature_keys, target_keys), batch_size=batch_size,
                       num_epochs=num_epochs, shuffle=shuffle, queue_capacity=queue_capacity)

    return input_fn


def _split(batch: Mapping[str, Any], x: Any, feature_keys: list[str], target_keys: Any) -> Any:
    features = batch[_DIRECT_KEY] if isinstance(x, np.ndarray) else {k: batch[k] for k in feature_keys}
    if target_keys is None:
        return features
    if isinstance(target_keys, str):
        return features, batch[target_keys]
    return features, {k: batch[k] for k in target_keys}
