"""One transfer per pair of tasks and step in a between-graph training graph.

In TF1's between-graph replication a worker's step reads every variable from
its ps and sends every gradient (and the optimizer's scalar hyper-parameters)
back, and TensorFlow moves each tensor that crosses tasks as its own RPC. On a
small model those RPCs, not the maths, set the pace. After the ``model_fn`` has
built the step, ``pack_transfers`` rewires it: the tensors that one task sends
another in a step are concatenated on the sending task, sent as one tensor,
and split on the receiving one. The graph computes the same values in the same
order; only the number of RPCs changes (a three-layer MLP with Adam: from 16
per worker and step to 2).

Only what is safe to move is moved: floating-point tensors of known shapes (or known but for
their rows: a lookup's rows and their gradient, whose row counts travel in the packed tensor), outside
TF1 control-flow contexts, whose consumers are part of the step (what the
``fetches`` need). A tensor that depends on one of its group's consumers (a read ordered after
the update) stays out of the group, so no cycle is made, and travels in a later one: an
execution of several steps sends one tensor per pair of tasks and step.

The graph-mode Estimator and the workers of ``fit``'s between-graph steps use it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tensorflow as tf

from toolkit._compat.tensorflow import in_control_flow, update_input

__all__ = ["pack_transfers", "task_of"]

logger = logging.getLogger(__name__)

v1 = tf.compat.v1


def _task(device: str) -> tuple[str | None, int | None, int | None]:
    spec = tf.DeviceSpec.from_string(device)
    return spec.job, spec.replica or 0, spec.task


def task_of(op: tf.Operation) -> tuple[str | None, int | None, int | None]:
    """The (job, replica, task) graph op ``op`` runs on."""
    return _task(_placed(op, op.graph))


def _placed(op: tf.Operation, graph: tf.Graph) -> str:
    """The device ``op`` runs on: that of the op it is colocated with, of the resource it uses, or its own.

    TensorFlow's placer puts an op next to the resource it reads or writes (a variable's
    ``ReadVariableOp`` built inside a layer, or under another device's scope), so that one is followed first.
    """
    for group in op.colocation_groups():
        name = group.decode()[len("loc:@"):]
        if name != op.name:
            try:
                return _placed(graph.get_operation_by_name(name), graph)
            except KeyError:
                return ""
    for tensor in op.inputs:
        if tensor.dtype == tf.resource:
            return _placed(tensor.op, graph)
    return op.device


def _reach(ops: Iterable[tf.Operation], neighbours: Callable[[tf.Operation], Iterable[tf.Operation]]) -> set[Any]:
    seen: set[tf.Operation] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(neighbours(op))
    return seen


def _children(graph: tf.Graph) -> dict[tf.Operation, list[tf.Operation]]:
    children: dict[tf.Operation, list[tf.Operation]] = {}
    for op in graph.get_operations():
        for parent in [t.op for t in op.inputs] + list(op.control_inputs):
            children.setdefault(parent, []).append(op)
    return children


def _acyclic(edges: list[Any], children: dict[tf.Operation, list[tf.Operation]]) -> tuple[list[Any], list[Any]]:
    """(the edges whose tensors can travel together, the rest): a tensor downstream of a consumer of the
    group stays out (for a later group: the next step's reads, after this step's updates).

    Dropping edges only removes consumers, so a tensor kept stays free of them; the first edges in
    dataflow order are always kept. Packing the kept ones adds paths only from kept tensors, so
    ``children`` (made before) still finds every path from the rest's consumers.
    """
    late = _reach([op for op, _, _ in edges], lambda op: children.get(op, ()))
    return [e for e in edges if e[2].op not in late], [e for e in edges if e[2].op in late]


#: the integer type of a packed float type's width: a tensor's row count travels in the packed tensor, bit for bit
_SIZE_TYPES = {tf.float32: tf.int32, tf.float64: tf.int64}


def _movable(tensor: tf.Tensor) -> bool:
    """A floating-point tensor (no ref) whose shape is known, or known but for the rows (a lookup's rows)."""
    dtype, shape = tensor.dtype, tensor.shape
    if not (dtype.is_floating and dtype.base_dtype == dtype) or shape.rank is None:
        return False
    return shape.is_fully_defined() or (dtype in _SIZE_TYPES and shape.rank >= 1 and shape[1:].is_fully_defined())


def _pack(graph: tf.Graph, edges: list[tuple[tf.Operation, int, tf.Tensor]], send_on: str, receive_on: str) -> int:
    """The tensors concatenated flat; the row counts of those with unknown ones appended, bitcast to the type."""
    tensors = list(dict.fromkeys(tensor for _, _, tensor in edges))
    if len(tensors) < 2:
        return 0
    dynamic = [t for t in tensors if not t.shape.is_fully_defined()]
    with graph.as_default(), v1.control_dependencies(None), v1.name_scope("tfdist_packed"):
        with v1.device(send_on):
            flat = [tf.reshape(t, [-1]) for t in tensors]
            if dynamic:
                size = _SIZE_TYPES[tensors[0].dtype]
                rows = tf.stack([tf.shape(t, out_type=size)[0] for t in dynamic])
                flat.append(tf.bitcast(rows, tensors[0].dtype))
            packed = tf.concat(flat, 0)
        with v1.device(receive_on):
            if dynamic:
                rows = tf.bitcast(packed[-len(dynamic):], size)
                known = {t: rows[i] for i, t in enumerate(dynamic)}
                lengths = tf.stack([t.shape.num_elements() if t.shape.is_fully_defined()
                                    else tf.cast(known[t], tf.int32) * t.shape[1:].num_elements() for t in tensors]
                                   + [len(dynamic)])
                parts = tf.split(packed, lengths, num=len(tensors) + 1)[:-1]
                shapes = [t.shape if t.shape.is_fully_defined() else [-1, *t.shape[1:]] for t in tensors]
            else:
                parts = tf.split(packed, [t.shape.num_elements() for t in tensors])
                shapes = [t.shape for t in tensors]
            received = {t: tf.reshape(part, shape) for t, part, shape in zip(tensors, parts, shapes, strict=True)}
    for op, index, tensor in edges:
        update_input(op, index, received[tensor])
    logger.debug("packed %d %s tensors from %s to %s", len(tensors), tensors[0].dtype.name, send_on, receive_on)
    return len(tensors) - 1


def pack_transfers(graph: tf.Graph, fetches: Sequence[Any]) -> int:
    """Packs the step's cross-task tensors of ``graph`` into one per (sender, receiver, dtype).

    ``fetches`` are what a training step runs (the train op, the loss); returns how
    many transfers were saved per step.
    """
    try:  # a train op may be an op, a tensor, or a variable-like object (e.g. ``assign_add``'s result)
        elements = [graph.as_graph_element(f, allow_tensor=True, allow_operation=True) for f in fetches
                    if f is not None]
    except (TypeError, ValueError) as exc:
        logger.info("transfers not packed: a fetch is not an element of the graph (%s)", exc)
        return 0
    step = _reach((e.op if isinstance(e, tf.Tensor) else e for e in elements),
                  lambda op: [*(t.op for t in op.inputs), *op.control_inputs])
    devices = {op: _placed(op, graph) for op in step}
    groups: dict[tuple[Any, ...], list[tuple[tf.Operation, int, tf.Tensor]]] = {}
    for op in step:
        if not devices[op] or in_control_flow(op):
            continue
        for index, tensor in enumerate(op.inputs):
            source = tensor.op
            if source not in devices or not devices[source] or in_control_flow(source) or not _movable(tensor):
                continue
            sender, receiver = _task(devices[source]), _task(devices[op])
            if sender == receiver or None in (sender[0], sender[2], receiver[0], receiver[2]):
                continue
            groups.setdefault((tensor.dtype, devices[source], devices[op]), []).append((op, index, tensor))
    saved = 0
    for (_, send_on, receive_on), edges in sorted(groups.items(), key=lambda item: str(item[0])):
        children = _children(graph)
        while edges:  # a round per step when an execution holds several
            kept, edges = _acyclic(edges, children)
            if not kept:  # cannot happen in a DAG (see _acyclic); the rest then travels unpacked
                break
            saved += _pack(graph, kept, send_on, receive_on)
    return saved
