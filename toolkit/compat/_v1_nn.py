"""``tf.nn`` of ``toolkit.compat.v1``: TF1's, with an ``embedding_lookup`` that reads each distinct id once.

TF1's ``tf.nn.embedding_lookup(table, ids)`` on a table partitioned over the
parameter servers (``tf.get_variable(..., partitioner=...)``, the way TF1
click-through models were written) gathers a row for every id of the batch
on its ps and sends them all to the worker; its gradient sends a row per id
back, and the optimizer sums the duplicates on the ps. Click-through ids
repeat: a batch of 512 examples of 26 Zipf-distributed features holds about
6,200 distinct ids in 13,312.

Here, when the table lives elsewhere (partitioned, a list of parts, or one
variable on a ``ps`` job) and the graph is a TF1 graph, the ids are made
distinct first on the caller's device (one ``Unique`` per ids tensor and
graph, shared by every table looked up with the same ids, as a wide & deep
model does), TF's own lookup reads only those rows, and a ``gather`` puts
them in the batch's order. The values are TF's; the gradient each part
receives holds each row once, summed on the worker, so TF1 optimizers skip
their own sum of duplicates (a ``Unique`` and an ``UnsortedSegmentSum`` per
part on its ps) for it. ``max_norm`` clips per row, so it applies
alike. Eager calls and local tables are TF's call unchanged.
"""
from __future__ import annotations

import types
from typing import Any

import tensorflow as _tf

from strategies._compat import graph_cache
from toolkit._compat.tensorflow import current_control_flow_context, distinct_row_updates, mark_distinct_rows
from toolkit._rows import expand_rows

__all__ = ["embedding_lookup", "namespace", "remote_table"]

_v1 = _tf.compat.v1


def namespace() -> types.ModuleType:
    """``tf.compat.v1.nn`` with ``embedding_lookup`` replaced."""
    original = _v1.nn
    module = types.ModuleType("toolkit.compat.v1.nn", original.__doc__)

    def __getattr__(attribute: str) -> Any:
        return getattr(original, attribute)

    def __dir__() -> list[str]:
        return sorted(dir(original))

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__, embedding_lookup=embedding_lookup)
    return module


def _parts(params: Any) -> list[Any]:
    if isinstance(params, (list, tuple)):
        return list(params)
    if hasattr(params, "_get_variable_list"):  # a PartitionedVariable (not in TF's public API)
        return list(params)
    return [params]


def remote_table(params: Any) -> bool:
    """Whether the table ``params`` names is partitioned, or one variable placed on a ``ps`` job."""
    parts = _parts(params)
    if len(parts) > 1:
        return True
    device = getattr(parts[0], "device", "") or ""
    return isinstance(device, str) and "/job:ps" in device


def _distinct(ids: Any) -> tuple[Any, Any]:
    """``ids``' distinct values and each id's position among them, made once per ids tensor and graph."""
    made = graph_cache(ids.graph, "distinct_ids")
    key = (ids.ref(), id(current_control_flow_context(ids.graph)))  # not across a while loop's or cond's edge
    if key not in made:
        with _tf.name_scope("distinct_ids"):
            made[key] = _tf.unique(_tf.reshape(ids, [-1]))
    return made[key]


def embedding_lookup(params: Any, ids: Any, partition_strategy: str = "mod", name: str | None = None,
                     validate_indices: bool = True, max_norm: Any = None) -> Any:
    """TF1's ``tf.nn.embedding_lookup``, reading each distinct id of ``ids`` once from a remote table."""
    composite = _tf.is_tensor(ids) and not isinstance(ids, _tf.Tensor)  # ragged ids: TF's own dispatch
    if _tf.executing_eagerly() or composite or not remote_table(params):
        return _v1.nn.embedding_lookup(params, ids, partition_strategy=partition_strategy, name=name,
                                       validate_indices=validate_indices, max_norm=max_norm)
    ids = _tf.convert_to_tensor(ids, name="ids")
    if not ids.dtype.is_integer:
        return _v1.nn.embedding_lookup(params, ids, partition_strategy=partition_strategy, name=name,
                                       validate_indices=validate_indices, max_norm=max_norm)
    with _tf.name_scope(name or "embedding_lookup"):
        distinct, position = _distinct(ids)
        before = len(ids.graph.get_operations())
        rows = _v1.nn.embedding_lookup(params, distinct, partition_strategy=partition_strategy,
                                       validate_indices=validate_indices, max_norm=max_norm)
        _mark_part_rows(ids.graph.get_operations()[before:], params)
        gathered = expand_rows(rows, position)  # its gradient: the sum per distinct row, here
        shape = _tf.concat([_tf.shape(ids), _tf.shape(rows)[1:]], axis=0)
        result = _tf.reshape(gathered, shape)
        result.set_shape(ids.shape.concatenate(rows.shape[1:]))
        return result


def _mark_part_rows(made: list[Any], params: Any) -> None:
    """Marks the ids each part's gather reads as distinct rows: its gradient needs no sum on the ps.

    Each part reads the distinct ids that fall in it, shifted or divided by TF's partition strategy
    (one to one within a part), so the optimizer's ``Unique`` and ``UnsortedSegmentSum`` per part
    would sum nothing (``toolkit._compat.tensorflow.distinct_row_updates``).
    """
    handles = {part.handle.ref() for part in _parts(params) if _resource(part)}
    for op in made:
        if op.type == "ResourceGather" and op.inputs[0].ref() in handles:
            mark_distinct_rows(op.inputs[1])
    distinct_row_updates()


def _resource(part: Any) -> bool:
    return isinstance(getattr(part, "handle", None), _tf.Tensor)
