"""Embedding and linear lookups of single-valued id columns, one transfer per ps and direction.

A click-through ``DNNLinearCombinedClassifier`` has one ``embedding_column`` (deep) and one
categorical column (wide) per categorical feature, each table split over the ps by the input
layer's partitioner. TF1's feature columns look each shard up on its own: the ids of every
shard go to its ps, its rows come back, and its gradient goes back again, each a separate RPC
(26 features x 2 parts x 2 shards is over 300 per worker step), and the lookups are
``safe_embedding_lookup_sparse`` on ids turned sparse. Those RPCs, not the maths, set the pace.

Here, for a column whose ids are an identity column's dense ``[batch]`` or ``[batch, 1]`` ints
(one id per example, the usual click-through input), the stock ``input_layer`` /
``linear_model`` still create the variables (same names, shapes, partitions, initialisers and
collections as TF), but the logits come from a packed lookup: all of a ps's shards are looked up
on that ps from one ``[batch, tables]`` id tensor, and their rows come back as one
``[batch, sum of widths]`` tensor. Built with ``colocate_gradients_with_ops``, the gradient of
that tensor goes back as one tensor too and is split into each shard's row-sparse
``IndexedSlices`` on the ps. The stock ops stay in the graph unused (a session runs only what
its fetches need). For a single id per example every combiner gives the row itself, and a
missing id (-1) gives zeros, as TF's sparse path does.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

__all__ = ["fast_input_layer", "fast_linear_logits", "packed_lookup"]

v1 = tf.compat.v1


@functools.lru_cache(maxsize=1)
def _column_types() -> tuple[Any, Any]:
    """(identity column, embedding column) classes, as the public constructors make them."""
    identity = v1.feature_column.categorical_column_with_identity("k", 1)
    return type(identity), type(v1.feature_column.embedding_column(identity, 1))


def identity_column(column: Any) -> bool:
    return isinstance(column, _column_types()[0])


def embedding_over_identity(column: Any) -> bool:
    return isinstance(column, _column_types()[1]) and identity_column(column.categorical_column)


def _dense_ids(features: Mapping[str, Any], column: Any) -> tf.Tensor | None:
    """The column's ids as a dense int64 ``[batch]`` tensor (validated), or None when it does not qualify."""
    value = features.get(column.key)
    if not isinstance(value, tf.Tensor) or not value.dtype.is_integer or value.shape.rank not in (1, 2):
        return None
    if value.shape.rank == 2 and value.shape[-1] != 1:
        return None
    ids = tf.reshape(tf.cast(value, tf.int64), [-1])
    buckets = column.num_buckets
    if column.default_value is not None:
        outside = tf.logical_and(tf.not_equal(ids, -1), tf.logical_or(ids < 0, ids >= buckets))
        return tf.where(outside, tf.constant(column.default_value, tf.int64), ids)
    message = (f"feature {column.key} has an id outside [0, {buckets}), the num_buckets of its "
               "categorical_column_with_identity. Map the ids into that range, raise num_buckets, or pass "
               "default_value for ids outside it.")
    checks = [v1.assert_less(ids, tf.constant(buckets, tf.int64), message=message),
              v1.assert_greater_equal(ids, tf.constant(-1, tf.int64), message=message)]
    with tf.control_dependencies(checks):
        return tf.identity(ids)


def _parts(candidates: Any, name: str) -> list[Any]:
    """The variable ``name`` (``.../C1/weights``), or its parts in order, among ``candidates``.

    TF's ``cols_to_vars`` lists the variables under the column's scope *prefix*, so column ``C1``
    also gets ``C10``'s: only an exact name (or its ``/part_<i>``) counts here.
    """
    pattern = re.compile(rf"(^|.*/){re.escape(name)}(/part_(\d+))?$")
    found = [(int(m.group(3) or 0), v) for v in candidates if (m := pattern.match(v.op.name))]
    return [v for _, v in sorted(found, key=lambda item: item[0])]


def packed_lookup(ids: Sequence[tf.Tensor], tables: Sequence[Sequence[Any]]) -> list[tf.Tensor]:
    """Rows ``[batch, width]`` of each table (its parts, in order) for its ids; zeros for ids in no part."""
    by_device: dict[str, list[tuple[int, int, Any]]] = {}
    for t, parts in enumerate(tables):
        offset = 0
        for part in parts:
            by_device.setdefault(part.device, []).append((t, offset, part))
            offset += int(part.shape[0])
    found: list[list[tf.Tensor]] = [[] for _ in tables]
    for entries in by_device.values():
        used = sorted({t for t, _, _ in entries})
        stacked = tf.stack([ids[t] for t in used], axis=1)  # one id transfer to this ps
        rows = []
        with v1.colocate_with(entries[0][2]):
            batch = tf.shape(stacked, out_type=tf.int64)[0]
            for t, offset, part in entries:
                local = stacked[:, used.index(t)] - offset
                here = tf.logical_and(local >= 0, local < int(part.shape[0]))
                gathered = tf.gather(part, tf.boolean_mask(local, here))
                rows.append(tf.scatter_nd(tf.where(here), gathered,
                                          tf.stack([batch, tf.constant(int(part.shape[1]), tf.int64)])))
            packed = tf.concat(rows, axis=1) if len(rows) > 1 else rows[0]  # one row transfer back
        widths = [int(part.shape[1]) for _, _, part in entries]
        for (t, _, _), piece in zip(entries, tf.split(packed, widths, axis=1), strict=True):
            found[t].append(piece)
    return [tf.add_n(pieces) if len(pieces) > 1 else pieces[0] for pieces in found]


def fast_input_layer(features: Mapping[str, Any], columns: Sequence[Any]) -> tf.Tensor:
    """``input_layer(features, columns)``, with single-valued identity embedding columns looked up packed."""
    outputs: dict[Any, tf.Tensor] = {}
    variables: dict[Any, list[Any]] = {}
    stock = v1.feature_column.input_layer(dict(features), list(columns), cols_to_vars=variables,
                                          cols_to_output_tensors=outputs)
    fast = [(c, ids) for c in columns if embedding_over_identity(c) and c.max_norm is None
            and (ids := _dense_ids(features, c.categorical_column)) is not None]
    if not fast:
        return stock
    rows = packed_lookup([ids for _, ids in fast], [_parts(variables[c], f"{c.name}/embedding_weights")
                                                    for c, _ in fast])
    outputs.update({c: r for (c, _), r in zip(fast, rows, strict=True)})
    return tf.concat([outputs[c] for c in sorted(columns, key=lambda c: c.name)], axis=1)


def fast_linear_logits(features: Mapping[str, Any], columns: Sequence[Any], *, units: int,
                       sparse_combiner: str) -> tf.Tensor:
    """``linear_model(...)``; packed when every column is an identity column with one id per example."""
    variables: dict[Any, list[Any]] = {}
    stock = v1.feature_column.linear_model(dict(features), list(columns), units=units,
                                           sparse_combiner=sparse_combiner, cols_to_vars=variables)
    ids = [_dense_ids(features, c) if identity_column(c) else None for c in columns]
    if any(i is None for i in ids):
        return stock
    rows = packed_lookup(ids, [_parts(variables[c], f"{c.name}/weights") for c in columns])
    bias = _parts(variables["bias"], "bias_weights")
    return tf.nn.bias_add(tf.add_n(rows), tf.concat(bias, axis=0) if len(bias) > 1 else bias[0])
