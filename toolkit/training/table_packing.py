"""One transfer per ps for the rows of tables looked up with the same ids, in a between-graph step.

A wide & deep model looks its two tables up with the same ids; the lookup routes
them once, so on each ps both tables' shards gather the same rows, and each
gathered block (``[rows, dim]``, its row count known only when the step runs)
crosses to the worker as a tensor of its own. ``pack_table_reads`` rewires a
built step so that the gathers of one ps with the same ids are concatenated
there and split on the worker: one transfer per ps and step for all such tables
(the gradients travel likewise: ``toolkit.layers._row_exchange``).

The values are the same tensors, moved together; the gradients (built before)
do not read the gathered rows, so they are unchanged.
"""
from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from toolkit._compat.tensorflow import in_control_flow, update_input
from toolkit._graph_packing import _placed, task_of

__all__ = ["pack_table_reads"]

logger = logging.getLogger(__name__)

v1 = tf.compat.v1


def _consumers(tensor: tf.Tensor) -> list[tuple[tf.Operation, int]]:
    return [(op, index) for op in tensor.consumers() for index, given in enumerate(op.inputs) if given is tensor]


def _one_device(tensor: tf.Tensor, graph: tf.Graph) -> str | None:
    """The device every consumer of ``tensor`` runs on, if they share one (and it is set)."""
    devices = {_placed(op, graph) for op, _ in _consumers(tensor)}
    return devices.pop() if len(devices) == 1 and "" not in devices else None


def _gather_key(op: tf.Operation, graph: tf.Graph) -> tuple[Any, ...] | None:
    if op.type != "ResourceGather" or in_control_flow(op) or op.get_attr("batch_dims") != 0:
        return None
    out = op.outputs[0]
    if out.shape.rank != 2 or out.shape[1] is None:
        return None
    source = _placed(op, graph)
    target = _one_device(out, graph)
    if not source or target is None:
        return None
    spec = tf.DeviceSpec.from_string(target)
    if task_of(op) == (spec.job, spec.replica or 0, spec.task):
        return None
    return op.inputs[1].ref(), source, target, out.dtype


def _pack_gathers(graph: tf.Graph) -> int:
    groups: dict[tuple[Any, ...], list[tf.Operation]] = {}
    for op in graph.get_operations():
        key = _gather_key(op, graph)
        if key is not None:
            groups.setdefault(key, []).append(op)
    saved = 0
    for (_, source, target, _), gathers in groups.items():
        if len(gathers) < 2:
            continue
        outputs = [op.outputs[0] for op in gathers]
        uses = [_consumers(out) for out in outputs]
        with graph.as_default(), v1.control_dependencies(None), v1.name_scope("tfdist_table_reads"):
            with v1.device(source):
                packed = tf.concat(outputs, axis=1)
            with v1.device(target):
                parts = tf.split(packed, [int(out.shape[1]) for out in outputs], axis=1)
        for part, used in zip(parts, uses, strict=True):
            for consumer, index in used:
                update_input(consumer, index, part)
        saved += len(gathers) - 1
    return saved


def pack_table_reads(graph: tf.Graph) -> int:
    """Packs the gathers of each ps that share their ids; returns the transfers saved per execution."""
    saved = _pack_gathers(graph)
    if saved:
        logger.debug("table reads: %d transfers fewer per execution", saved)
    return saved
