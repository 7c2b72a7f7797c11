"""One prediction per time step (``return_sequences=True``): any head over the valid steps of each sequence.

As upstream's ``SequentialHeadWrapper``: in training and evaluation the
logits ``[batch, time, d]``, the labels ``[batch, time(, 1)]`` and the
per-step weights (the head's ``weight_column``, when it is a feature key or
numeric column) are flattened to the valid steps only (the sequence mask),
and the head computes its loss and metrics over those rows as if each step
were an example. In prediction the head's predictions keep their time axis,
and the step mask is added under the mask key, so a reader knows which steps
are padding.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._head_base import PREDICT, make_spec
from toolkit.estimator.canned._model_fns import _spec

__all__ = ["MASK_KEY", "check", "spec"]

v1 = tf.compat.v1
MASK_KEY = "sequence_mask"
_SHAPE_ERROR = "Tensor shape is incompatible with provided mask."   # upstream's phrase


def check(head: Any, mask_key: Any) -> None:
    """What a per-step head cannot be, refused at construction (upstream's checks)."""
    from toolkit.estimator.head import MultiHead
    if not isinstance(mask_key, str) or not mask_key:
        raise CannedError(f"`sequence_mask` column must be a string; got {type(mask_key).__name__} {mask_key!r}. "
                          "Pass the key for the step mask, e.g. sequence_mask='sequence_mask'.", field="sequence_mask")
    if isinstance(head, MultiHead):
        raise CannedError("`head` is a MultiHead; `MultiHead` is not supported with return_sequences=True (one "
                          "head per step). Use a single head, or return_sequences=False.", field="head")


def _weight_key(head: Any) -> str | None:
    column = getattr(head, "weight_column", None)
    if column is None:
        return None
    return column if isinstance(column, str) else getattr(column, "key", None)


def _flatten(tensor: Any, mask: tf.Tensor, expected: tf.Tensor, what: str) -> tf.Tensor:
    """The rows of ``tensor`` ``[batch, time, ...]`` at the valid steps, as ``[steps, ...]`` (rank 2 at least)."""
    if isinstance(tensor, (tf.SparseTensor, v1.SparseTensorValue)):
        tensor = tf.sparse.reorder(tensor)
        rank = tensor.shape.ndims
        flat = tensor.values if rank is None or rank <= 2 else tf.reshape(tensor.values, [-1, *tensor.shape[2:]])
    else:
        tensor = v1.convert_to_tensor(tensor)
        rank = tensor.shape.ndims
        if rank is not None and rank < 2:
            raise CannedError(f"{what} have shape {tensor.shape.as_list()}; with return_sequences=True they need "
                              "one value per time step, shape [batch, time] or [batch, time, 1]. Return a "
                              "sequence per example from input_fn.", field=what)
        same_steps = v1.assert_equal(tf.shape(tensor)[:2], tf.shape(mask), message=f"{_SHAPE_ERROR} ({what}: "
                                     "[batch, time] must match the sequence feature's padded [batch, time])")
        with tf.control_dependencies([same_steps]):
            flat = tf.boolean_mask(tensor, mask)
    if rank == 2:
        flat = tf.expand_dims(flat, -1)
    check_rows = v1.assert_equal(tf.shape(flat)[0], expected, message=f"{_SHAPE_ERROR} ({what}: one value per "
                                 "valid step of each sequence, as many as the sequence feature's length)")
    with tf.control_dependencies([check_rows]):
        return tf.identity(flat)


def spec(head: Any, *, features: Mapping[str, Any], mode: str, logits: tf.Tensor, labels: Any, mask: tf.Tensor,
         mask_key: str, train_op_fn: Callable[[tf.Tensor], Any] | None) -> Any:
    """The EstimatorSpec of ``head`` applied per valid step."""
    if mode == PREDICT:
        out = _spec(head, make_spec, features=features, mode=mode, logits=logits, labels=None, train_op_fn=None)
        predictions = {**out.predictions, mask_key: mask}
        return out._replace(predictions=predictions)
    with v1.name_scope("flatten"):
        expected = tf.reduce_sum(tf.cast(mask, tf.int32))
        flat_logits = _flatten(logits, mask, expected, "logits")
        flat_labels = None if labels is None else _flatten(labels, mask, expected, "labels")
        flat_features: dict[str, Any] = {}
        key = _weight_key(head)
        if key is not None:
            if key not in features:
                raise CannedError(f"`weight_column` is {key!r} but the features have no such key (keys: "
                                  f"{sorted(features)}). Add one weight per time step.", field="weight_column")
            flat_features[key] = _flatten(features[key], mask, expected, "weights")
    return _spec(head, make_spec, features=flat_features, mode=mode, logits=flat_logits, labels=flat_labels,
                 train_op_fn=train_op_fn)
