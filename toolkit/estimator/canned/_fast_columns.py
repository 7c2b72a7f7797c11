"""Embedding and linear lookups of single-valued id columns, one transfer per ps and direction.

A click-through ``DNNLinearCombinedClassifier`` has one ``embedding_column`` (deep) and one
categorical column (wide) per categorical feature, each table split over the ps by the input
layer's partitioner. TF1's feature columns look each shard up on its own: the ids of every
shard go to its ps, its rows come back, and its gradient goes back again, each a separate RPC
(26 features x 2 parts x 2 shards is over 300 per worker step), and the lookups are
``safe_embedding_lookup_sparse`` on ids turned sparse. Those RPCs, not the maths, set the pace.

Here, for a column whose feature holds one value per example (a dense ``[batch]`` or ``[batch, 1]``
int or string tensor, the usual click-through input) and whose ids are an identity, hashed
(``categorical_column_with_hash_bucket``) or vocabulary (``..._with_vocabulary_list/_file``)
column's, in an ``embedding_column`` or ``shared_embedding_columns``, the stock ``input_layer`` /
``linear_model`` still create the variables (same names, shapes, partitions, initialisers and
collections as TF), but the logits come from a packed lookup: the worker keys each (example,
table) slot by the shard holding its id and its row there, and sends each ps the batch's distinct
keys of its shards, once each, as one tensor; their rows come back as one ``[distinct, width]``
tensor per width, which the worker spreads over the ``[batch, sum of widths]`` slots. Hashing and
vocabulary tables are the column's own (TF's transform, on the worker). Built with
``colocate_gradients_with_ops``, the gradient goes back as one ``[distinct, width]`` tensor too
(the slots' sum per distinct row, on the worker) and is split into each shard's row-sparse
``IndexedSlices`` on the ps. The stock ops stay in the graph unused (a session runs only what
its fetches need). For a single id per example every combiner gives the row itself, and a
missing value (-1, ``''``, or outside a vocabulary without OOV buckets) gives zeros, as TF's
sparse path does.

The number of ops per step counts as much as the transfers (a ps runs its part of every step, op
by op, on few cores), so the per-part work is kept to what the maths needs: the worker keys all
the tables' slots together (one ``Unique``, one ``DynamicPartition`` by ps), each ps splits its
keys by part (one ``DynamicPartition``), the deep and wide tables share that routing when their
shards lie alike, each part reads each distinct row of the batch once, one gather per width
places the rows, each id is transformed once per graph and a route's identity ids are checked
by one ``Assert`` (not five ops per column), the rows a ps stitches back get their gradients
by one gather and one split (not a gather per part), and each part's gradient is its
distinct rows' ``IndexedSlices`` built directly (TF's gather gradient adds seven shape ops per
part), which the canned model_fns' TF1 optimizers apply without summing duplicates
(``toolkit._compat.tensorflow.distinct_row_updates``): one ``Unique`` per width and step instead
of a ``Unique`` and an ``UnsortedSegmentSum`` per part, and half the rows gathered and updated.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from strategies import _native as native
from strategies._compat import graph_cache
from toolkit._compat.tensorflow import categorical_ids, mark_distinct_rows
from toolkit._rows import expand_rows, gather_parts, stitch_partitioned

__all__ = ["categorical_column", "fast_input_layer", "fast_linear_logits", "packable_embedding", "packed_lookup"]

v1 = tf.compat.v1


@functools.lru_cache(maxsize=1)
def _column_types() -> dict[str, tuple[Any, ...]]:
    """The column classes the packed path takes, as the public constructors make them."""
    fc = v1.feature_column
    identity = fc.categorical_column_with_identity("k", 2)
    others = (fc.categorical_column_with_hash_bucket("k", 2), fc.categorical_column_with_vocabulary_list("k", ["a"]),
              fc.categorical_column_with_vocabulary_file("k", "vocabulary.txt", vocabulary_size=1))
    with tf.Graph().as_default():  # TF refuses to make shared embedding columns eagerly
        shared = fc.shared_embedding_columns([identity], 1)[0]
    return {"identity": (type(identity),), "transformed": tuple(type(c) for c in others),
            "embedding": (type(fc.embedding_column(identity, 1)),), "shared": (type(shared),)}


def identity_column(column: Any) -> bool:
    return isinstance(column, _column_types()["identity"])


def categorical_column(column: Any) -> bool:
    """An identity, hashed or vocabulary column: one bucket id per input value."""
    return identity_column(column) or isinstance(column, _column_types()["transformed"])


def packable_embedding(column: Any) -> bool:
    """An ``embedding_column`` or ``shared_embedding_columns`` member over such a column, without ``max_norm``."""
    kinds = _column_types()["embedding"] + _column_types()["shared"]
    return (isinstance(column, kinds) and categorical_column(column.categorical_column)
            and column.max_norm is None)


def _single_values(features: Mapping[str, Any], key: str) -> tf.Tensor | None:
    """The feature as a dense ``[batch]``/``[batch, 1]`` int or string tensor (one value per example), or None."""
    value = features.get(key)
    if not isinstance(value, tf.Tensor) or value.shape.rank not in (1, 2):
        return None
    if not (value.dtype.is_integer or value.dtype == tf.string):
        return None
    if value.shape.rank == 2 and value.shape[-1] != 1:
        return None
    return value


def _memo(graph: tf.Graph) -> dict[Any, Any]:
    """Tensors memoised for ``graph``, kept on the graph itself (they live and die with it)."""
    return graph_cache(graph, "fast_columns")


class _Ids(NamedTuple):
    """A column's ids, ``[batch, 1]`` int64 (-1 where missing), and the range they are checked against."""

    values: tf.Tensor
    check: tuple[int, str] | None  # (num_buckets, the error naming the feature), checked with the lookup


def _dense_ids(features: Mapping[str, Any], column: Any) -> _Ids | None:
    """The column's ids, or None when it does not qualify.

    Transformed once per graph for a feature and column: the deep and wide parts of a wide & deep
    model look the same ids up once. An identity column's range is checked where its lookup's
    route is built, for all the route's columns at once (``_Route``).
    """
    value = _single_values(features, column.key)
    if value is None:
        return None
    known = _memo(value.graph)
    key = ("ids", value.ref(), column)
    if key not in known:
        known[key] = _transform(value, column)
    return known[key]


def _transform(value: tf.Tensor, column: Any) -> _Ids | None:
    if not identity_column(column):  # hashing, vocabulary tables: the column's own transform
        ids = categorical_ids(column, {column.key: value})
        return _Ids(tf.reshape(tf.sparse.to_dense(ids, default_value=-1), [-1, 1]), None)
    if not value.dtype.is_integer:
        return None
    ids = tf.cast(value, tf.int64)
    ids = ids if ids.shape.rank == 2 else ids[:, None]
    buckets = column.num_buckets
    if column.default_value is not None:
        outside = tf.logical_and(tf.not_equal(ids, -1), tf.logical_or(ids < 0, ids >= buckets))
        return _Ids(tf.where(outside, tf.constant(column.default_value, tf.int64), ids), None)
    return _Ids(ids, (buckets, f"feature {column.key} has an id outside [0, {buckets}), the num_buckets of its "
                              "categorical_column_with_identity. Map the ids into that range, raise num_buckets, "
                              "or pass default_value for ids outside it."))


def _checked(stacked: tf.Tensor, checks: Sequence[tuple[int, str] | None]) -> tf.Tensor:
    """``stacked`` (``[batch, tables]`` ids), after one check of every table's range (-1, missing, passes).

    One ``Assert`` for all the tables (not one per column, with five ops each, every step), whose
    message names the first table with an id outside its range.
    """
    if not any(checks):
        return stacked
    bounds = tf.constant([2**62 if c is None else c[0] for c in checks], tf.int64)
    messages = tf.constant(["" if c is None else c[1] for c in checks])
    valid = tf.reduce_all(tf.logical_and(stacked >= -1, stacked < bounds), axis=0)
    message = tf.gather(messages, tf.argmin(tf.cast(valid, tf.int32)))
    with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(valid), [message])]):  # a plain Assert op
        return tf.identity(stacked)


def _parts(candidates: Any, name: str) -> list[Any]:
    """The variable ``name`` (``.../C1/weights``), or its parts in order, among ``candidates``.

    TF's ``cols_to_vars`` lists the variables under the column's scope *prefix*, so column ``C1``
    also gets ``C10``'s: only an exact name (or its ``/part_<i>``) counts here.
    """
    pattern = re.compile(rf"(^|.*/){re.escape(name)}(/part_(\d+))?$")
    found = [(int(m.group(3) or 0), v) for v in candidates if (m := pattern.match(v.op.name))]
    return [v for _, v in sorted(found, key=lambda item: item[0])]


_Layout = tuple[tuple[tuple[str, int, int], ...], ...]  # per table, its parts' (device, first row, rows)


class _Route:
    """The batch's distinct (part, row) keys over every part of some tables, and which ps holds each.

    Built here (on the worker) from the ``[batch, tables]`` ids: each (example, table) slot's key is
    the number of the part holding its id times ``stride`` plus its row there (one key, past every
    part, for a missing id); ``expand`` ``[batch * tables]`` gives each slot's place among the
    distinct keys (a click-through batch of 512 has about half as many distinct ids as ids);
    ``keys[d]`` are those of ``devices[d]``'s parts and ``positions[d]`` their places (the last,
    the missing ids'). Once per graph for the same ids and layout: a wide & deep model's deep and
    wide tables share it when their parts lie alike.
    """

    def __init__(self, ids: list[_Ids], layout: _Layout) -> None:
        self.parts = [(device, first, rows) for table in layout for device, first, rows in table]
        self.stride = max(rows for _, _, rows in self.parts)
        self.devices = list(dict.fromkeys(device for device, _, _ in self.parts))
        most, missing = max(len(table) for table in layout), len(self.parts) * self.stride
        firsts, numbers, count = [], [], 0  # per table and part (padded past any id): first row, part number
        for table in layout:
            firsts.append([first for _, first, _ in table] + [2**62] * (most - len(table)))
            numbers.append(list(range(count, count + len(table))) + [0] * (most - len(table)))
            count += len(table)
        stacked = _checked(tf.concat([i.values for i in ids], axis=1), [i.check for i in ids])
        starts = tf.constant(firsts, tf.int64)
        part = tf.reduce_sum(tf.cast(stacked[:, :, None] >= starts, tf.int32), axis=2) - 1  # -1: a missing id
        flat = tf.range(len(layout)) * most + tf.maximum(part, 0)
        keys = tf.where(part >= 0, tf.gather(tf.constant(sum(numbers, []), tf.int64), flat) * self.stride
                        + stacked - tf.gather(tf.reshape(starts, [-1]), flat), missing)
        distinct, self.expand = tf.unique(tf.reshape(keys, [-1]))
        owners = [self.devices.index(device) for device, _, _ in self.parts] + [len(self.devices)]
        owner = tf.gather(tf.constant(owners, tf.int32), distinct // self.stride)
        self.keys = tf.dynamic_partition(distinct, owner, len(self.devices) + 1)
        self.positions = tf.dynamic_partition(tf.range(tf.shape(distinct)[0]), owner, len(self.devices) + 1)


def _route(ids: list[_Ids], layout: _Layout) -> _Route:
    known = _memo(ids[0].values.graph)
    key = ("route", tuple((i.values.ref(), i.check) for i in ids), layout)
    if key not in known:
        known[key] = _Route(ids, layout)
    return known[key]


def _split_on(route: _Route, d: int, colocate: Any) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    """On ``route.devices[d]``: per part of it, its distinct local rows (marked distinct) and their places."""
    keys = route.keys[d]
    known = _memo(keys.graph)
    if ("split", keys.ref()) not in known:
        count = sum(device == route.devices[d] for device, _, _ in route.parts)
        which, local = _which_on(route, d, colocate)
        with v1.colocate_with(colocate):
            rows = tf.dynamic_partition(local, which, count)
            places = tf.dynamic_partition(tf.range(tf.shape(keys)[0]), which, count)
        known[("split", keys.ref())] = (rows, places)
        for r in rows:
            mark_distinct_rows(r)
    return known[("split", keys.ref())]


def _which_on(route: _Route, d: int, colocate: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """On ``route.devices[d]``: each distinct key's part (numbered among the device's) and row in it."""
    keys = route.keys[d]
    known = _memo(keys.graph)
    if ("which", keys.ref()) not in known:
        mine = [g for g, (device, _, _) in enumerate(route.parts) if device == route.devices[d]]
        local = [mine.index(g) if g in mine else 0 for g in range(len(route.parts))]
        with v1.colocate_with(colocate):
            known[("which", keys.ref())] = (tf.gather(tf.constant(local, tf.int32), keys // route.stride),
                                            tf.math.floormod(keys, route.stride))
    return known[("which", keys.ref())]


_GATHER_GRAD = "TfdistPackedRowsGather"


@tf.RegisterGradient(_GATHER_GRAD)
def _rows_gradient(op: Any, grad: tf.Tensor) -> tuple[tf.IndexedSlices, None]:
    """A part's gradient: the rows' gradients at their ids, the ``IndexedSlices`` TF's gather gradient gives.

    TF's builds it with about seven shape ops per part (reshapes that are no-ops for 1-D ids);
    here one op reads the part's shape.
    """
    return tf.IndexedSlices(grad, op.inputs[1], tf.raw_ops.VariableShape(input=op.inputs[0])), None


def _resource(variable: Any) -> bool:
    """A resource variable (not TF1's ref variable: ``use_resource=False``, ``disable_v2_behavior()``)."""
    handle = getattr(variable, "handle", None)
    return isinstance(handle, tf.Tensor) and handle.dtype == tf.resource


def _rows_on(route: _Route, d: int, parts: list[Any]) -> tf.Tensor:
    """``[distinct keys of the device, width]``: each distinct row of ``parts`` (those of one ps) read once.

    With tfdist's native kernels on that ps, one op reads them all (``toolkit._rows.gather_parts``)
    and the canned model_fns' TF1 Adagrad updates them all in one op; otherwise (and for ref
    variables) each part is read by its own gather and the rows stitched back.
    """
    if (len(parts) > 1 and native.usable_on(parts[0].device) and parts[0].dtype.base_dtype in (tf.float32, tf.float64)
            and all(_resource(p) for p in parts)):
        which, local = _which_on(route, d, parts[0])
        with v1.colocate_with(parts[0]):
            return gather_parts(parts, which, local)
    rows, places = _split_on(route, d, parts[0])
    with v1.colocate_with(parts[0]), parts[0].graph.gradient_override_map({"ResourceGather": _GATHER_GRAD}):
        gathered = [tf.gather(part, local) for part, local in zip(parts, rows, strict=True)]
        return stitch_partitioned(places, gathered) if len(parts) > 1 else gathered[0]  # one transfer back


def packed_lookup(ids: Sequence[_Ids], tables: Sequence[Sequence[Any]],
                  order: Sequence[int] | None = None) -> list[tuple[list[int], tf.Tensor]]:
    """Per width: its tables (numbers into ``tables``, in ``order``'s order) and their rows side by side,
    ``[batch, tables * width]``, for each table's ids; zeros for ids in no part.

    Each ps gets the batch's distinct (part, row) keys of its parts as one tensor; each part gathers
    only the distinct rows it holds (its gradient is row-sparse over them, each row once), and the
    rows go back as one ``[distinct, width]`` tensor per width, spread over the slots here, already
    in the order the caller joins them in (no split and concatenation of each table's columns).
    ``ids`` are the tables' ``_dense_ids``; those of identity columns are checked against their
    ranges, all in one op.
    """
    rank = {t: i for i, t in enumerate(range(len(tables)) if order is None else order)}
    by_width: dict[int, list[int]] = {}
    for t, parts in enumerate(tables):
        by_width.setdefault(int(parts[0].shape[1]), []).append(t)
    groups = []
    for width, members in by_width.items():
        layout: list[tuple[tuple[str, int, int], ...]] = []
        for t in members:
            firsts = [sum(int(p.shape[0]) for p in tables[t][:j]) for j in range(len(tables[t]))]
            layout.append(tuple((p.device, first, int(p.shape[0])) for p, first in zip(tables[t], firsts, strict=True)))
        route = _route([ids[t] for t in members], tuple(layout))  # in the tables' order: shared by deep and wide
        every = [part for t in members for part in tables[t]]
        pieces = [_rows_on(route, d, [p for p in every if p.device == device])
                  for d, device in enumerate(route.devices)]
        missing = tf.zeros(tf.stack([tf.shape(route.positions[-1])[0], width]), pieces[0].dtype)
        distinct = tf.dynamic_stitch(route.positions, [*pieces, missing])  # its gradient: a gather per piece
        ordered = sorted(range(len(members)), key=lambda i: rank[members[i]])
        expand = route.expand
        if ordered != list(range(len(members))):  # the slots' places, reordered: ints, not rows
            expand = tf.reshape(tf.gather(tf.reshape(expand, [-1, len(members)]), ordered, axis=1), [-1])
        # its gradient: a sum per row, here
        slots = tf.reshape(expand_rows(distinct, expand), [-1, len(members) * width])
        groups.append(([members[i] for i in ordered], slots))
    return groups


def _embedding_parts(column: Any, variables: Mapping[Any, list[Any]]) -> list[Any]:
    """The parts of an embedding column's table; a shared table is the one in its graph collection."""
    if isinstance(column, _column_types()["shared"]):
        (table,) = v1.get_collection(column.shared_embedding_collection_name)
        return [table] if isinstance(table, tf.Variable) else list(table)  # a PartitionedVariable: its parts
    return _parts(variables[column], f"{column.name}/embedding_weights")


def fast_input_layer(features: Mapping[str, Any], columns: Sequence[Any]) -> tf.Tensor:
    """``input_layer(features, columns)``, with single-valued embedding columns looked up packed."""
    outputs: dict[Any, tf.Tensor] = {}
    variables: dict[Any, list[Any]] = {}
    stock = v1.feature_column.input_layer(dict(features), list(columns), cols_to_vars=variables,
                                          cols_to_output_tensors=outputs)
    fast = [(c, ids) for c in columns if packable_embedding(c)
            and (ids := _dense_ids(features, c.categorical_column)) is not None]
    if not fast:
        return stock
    joined = sorted(columns, key=lambda c: c.name)  # input_layer's order
    place = {c: i for i, c in enumerate(joined)}
    groups = packed_lookup([ids for _, ids in fast], [_embedding_parts(c, variables) for c, _ in fast],
                           order=sorted(range(len(fast)), key=lambda t: place[fast[t][0]]))
    runs: dict[int, tuple[tf.Tensor, int]] = {}  # first place of a run of adjacent packed columns: its slots
    for members, slots in groups:
        width = int(slots.shape[1]) // len(members)
        at = [place[fast[t][0]] for t in members]
        start = 0
        while start < len(at):
            end = next((e for e in range(start + 1, len(at)) if at[e] != at[e - 1] + 1), len(at))
            whole = start == 0 and end == len(at)
            runs[at[start]] = (slots if whole else slots[:, start * width:end * width], end - start)
            start = end
    pieces, i = [], 0
    while i < len(joined):
        piece, count = runs[i] if i in runs else (outputs[joined[i]], 1)
        pieces.append(piece)
        i += count
    return tf.concat(pieces, axis=1) if len(pieces) > 1 else pieces[0]


def fast_linear_logits(features: Mapping[str, Any], columns: Sequence[Any], *, units: int,
                       sparse_combiner: str) -> tf.Tensor:
    """``linear_model(...)``; packed when every column is an identity, hashed or vocabulary column with one
    value per example."""
    variables: dict[Any, list[Any]] = {}
    stock = v1.feature_column.linear_model(dict(features), list(columns), units=units,
                                           sparse_combiner=sparse_combiner, cols_to_vars=variables)
    found = [_dense_ids(features, c) if categorical_column(c) else None for c in columns]
    ids = [i for i in found if i is not None]
    if len(ids) < len(columns):
        return stock
    groups = packed_lookup(ids, [_parts(variables[c], f"{c.name}/weights") for c in columns])
    weights = [tf.reduce_sum(tf.reshape(slots, [-1, len(members), units]), axis=1) for members, slots in groups]
    # TF's cols_to_vars lists only a partitioned bias's first part: find all of them by its name
    bias = _parts(v1.global_variables(), re.sub(r"/part_\d+$", "", variables["bias"][0].op.name))
    return tf.nn.bias_add(tf.add_n(weights), tf.concat(bias, axis=0) if len(bias) > 1 else bias[0])
