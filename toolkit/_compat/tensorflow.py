"""The fence around the private TensorFlow attributes that ``toolkit`` reads.

* ``SyncReplicasOptimizer.make_session_run_hook`` returns a hook that keeps its
  optimizer in ``_sync_optimizer``; the Estimator's chief needs that optimizer
  to hand the waiting workers their last tokens when training stops (TF1 left
  them blocked).
* TF1's feature columns (``tf.compat.v1.feature_column``'s ``_FeatureColumn``
  classes) only have ``_parse_example_spec`` and ``_variable_shape``; the
  canned estimators accept them next to the v2 columns. A categorical column's
  ids come from its ``_get_sparse_tensors`` through a ``_LazyBuilder`` (its hashing
  and vocabulary tables), for the canned estimators' packed lookups.
* A graph's ``Operation._update_input`` rewires one input of a built op, and
  ``Operation._get_control_flow_context`` says whether an op is inside a TF1
  ``while_loop``/``cond``; the Estimator's transfer packing needs both.
* ``resource_variable_ops.BaseResourceVariable`` makes a variable object of a
  resource handle, and ``_set_handle_shapes_and_types`` gives an eager handle
  its shape: ``fit(options=FitOptions(between_graph=True))`` names the chief's variables (TensorFlow's
  own eager variables are anonymous) and opens them by name on the workers.
* ``auto_control_deps.AutomaticControlDependencies`` orders the ops on each
  resource in a TF1 graph as ``tf.function`` does: a between-graph worker calls
  the same ``TrainStep`` (a Keras optimizer's update reads slots it has just
  written) in graph mode.

* A TF1 optimizer sums the duplicate rows of a sparse gradient in
  ``_resource_apply_sparse_duplicate_indices`` (a ``Unique`` and an
  ``UnsortedSegmentSum`` per variable), then updates them with its
  ``_resource_apply_sparse``; the canned estimators' packed lookups give each
  part a gradient of distinct rows already, and so do TF1-style lookups of
  ``toolkit.compat.v1.nn.embedding_lookup``; they mark those indices
  (``mark_distinct_rows``) and ``distinct_row_updates`` lets every TF1 optimizer
  skip that step for them. ``AdagradOptimizer._resource_apply_sparse`` is wrapped once
  (``native_tf1_adagrad``) so that, for a variable on a task the Estimator probed
  for tfdist's native kernel (``strategies._native``), it runs that kernel.

* A strategy's ``_scale_loss_for_estimator_enabled()`` makes TF1 optimizers
  divide each replica's loss by the replica count (tf.estimator's
  ``_train_model_distributed`` entered it), and the graph's
  ``_is_loss_scaled_by_optimizer`` tells how the per-replica losses are then
  reduced for reporting: the Estimator under ``train_distribute``.
* ``training_util._get_or_create_global_step_read`` makes (once per graph) the
  global-step read that ``StopAtStepHook``, ``CheckpointSaverHook`` and the other
  step hooks fetch every step; ``colocated_global_step_read`` makes it beside the
  global step first.

``missing_symbols()`` (and its unit test) names what an upgrade removed; the
internals ``strategies`` uses are fenced in ``strategies._compat``.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

__all__ = ["SYNC_HOOK_ATTRIBUTE", "automatic_control_dependencies", "categorical_ids", "colocated_global_step_read",
           "current_control_flow_context",
           "estimator_loss_scaling",
           "mirrored_on",
           "in_control_flow", "is_dense_column", "loss_scaled_by_optimizer",
           "is_feature_column", "missing_symbols",
           "named_variable", "native_tf1_adagrad", "parse_example_spec", "sync_optimizers", "update_input",
           "distinct_row_updates", "distinct_rows", "mark_distinct_rows", "PartsGradient", "mark_parts_gradient",
           "parts_gradient"]

SYNC_HOOK_ATTRIBUTE = "_sync_optimizer"


def sync_optimizers(hooks: Iterable[Any]) -> list[Any]:
    """The ``SyncReplicasOptimizer`` behind each of ``hooks`` that has one."""
    found = []
    for hook in hooks:
        optimizer = getattr(hook, SYNC_HOOK_ATTRIBUTE, None)
        if optimizer is not None and callable(getattr(optimizer, "get_init_tokens_op", None)):
            found.append(optimizer)
    return found


def is_feature_column(value: Any) -> bool:
    """A v2 feature column, or a TF1 ``_FeatureColumn``."""
    return isinstance(getattr(value, "name", None), str) and (
        hasattr(value, "parse_example_spec") or hasattr(value, "_parse_example_spec"))


def is_dense_column(column: Any) -> bool:
    """Whether ``column`` (v2 or TF1) yields a dense tensor."""
    return hasattr(column, "variable_shape") or hasattr(column, "_variable_shape")


def parse_example_spec(column: Any) -> Any:
    """The ``{key: FixedLenFeature/VarLenFeature}`` a v2 or TF1 column parses."""
    return column.parse_example_spec if hasattr(column, "parse_example_spec") else column._parse_example_spec


def categorical_ids(column: Any, features: Any) -> Any:
    """A categorical column's ids of ``features`` (a ``SparseTensor``), by the column's own transform.

    Hashing and vocabulary tables exactly as ``input_layer``/``linear_model`` apply them (TF1's
    ``_get_sparse_tensors`` through a ``_LazyBuilder``); the packed lookups of the canned estimators
    read them.
    """
    from tensorflow.python.feature_column import feature_column as fc_old

    return column._get_sparse_tensors(fc_old._LazyBuilder(dict(features))).id_tensor


def update_input(op: Any, index: int, tensor: Any) -> None:
    """Makes ``tensor`` the ``index``-th input of graph op ``op`` (the graph must not be finalized)."""
    op._update_input(index, tensor)


def in_control_flow(op: Any) -> bool:
    """Whether graph op ``op`` was built inside a TF1 control-flow context (``while_loop``, ``cond``)."""
    return op._get_control_flow_context() is not None


def current_control_flow_context(graph: Any) -> Any:
    """The TF1 control-flow context (``while_loop``, ``cond``) ops built now in ``graph`` join; None outside."""
    return graph._get_control_flow_context()


def named_variable(shared_name: str, dtype: Any, shape: Any, *, trainable: bool, **kwargs: Any) -> Any:
    """A resource variable object on the named resource ``shared_name`` on the current device.

    Eagerly and in a graph alike: the resource is looked up (or, once assigned, created) by name in
    the device's resource manager, so another client that names it reaches the same variable.
    ``kwargs`` go to ``BaseResourceVariable`` (``synchronization``, ``aggregation``, ...).
    """
    import tensorflow as tf
    from tensorflow.python.ops import resource_variable_ops

    dtype, shape = tf.as_dtype(dtype), tf.TensorShape(shape)
    handle = tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, shared_name=shared_name, container="",
                                    name="named_handle")
    eager = tf.executing_eagerly()
    if eager:  # a graph's VarHandleOp carries its shape; an eager handle needs it attached
        resource_variable_ops._set_handle_shapes_and_types(
            handle, resource_variable_ops.handle_data_util.create_handle_data(shape, dtype), False)
    return resource_variable_ops.BaseResourceVariable(
        trainable=trainable, shape=shape, dtype=dtype, handle=handle, unique_id=shared_name,
        handle_name=shared_name, in_graph_mode=not eager, **kwargs)


def automatic_control_dependencies() -> Any:
    """A context that orders the graph ops built inside it on each resource in program order.

    On exit its ``ops_which_must_run`` holds the stateful ops built inside (a step's updates).
    """
    from tensorflow.python.framework import auto_control_deps

    return auto_control_deps.AutomaticControlDependencies()


class _Devices:
    """What MirroredStrategy reads from a ``colocate_with`` variable: the devices of its copies."""

    def __init__(self, devices: Iterable[str]) -> None:
        self._devices = tuple(devices)


@contextlib.contextmanager
def mirrored_on(devices: Iterable[str]) -> Iterator[None]:
    """Inside a MirroredStrategy's scope, variables created here get one copy on each of ``devices``.

    MirroredStrategy puts a variable's copies on the devices of its
    ``colocate_with`` variable's ``_devices`` (its own replica devices
    otherwise); the copy for replica *i* is on ``devices[i]``. That is how a
    shard of a 2-D mesh lives on its model-axis device in every replica.
    """
    import tensorflow as tf

    placement = _Devices(devices)

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        kwargs["colocate_with"] = placement
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def estimator_loss_scaling(strategy: Any) -> Any:
    """The context in which TF1 optimizers scale each replica's loss by 1/replicas, as under tf.estimator."""
    return strategy._scale_loss_for_estimator_enabled()


def mark_distinct_rows(indices: Any) -> None:
    """Records that the 1-D ``indices`` hold distinct row ids: a gradient at them needs no duplicate sum."""
    from strategies._compat import graph_cache

    graph_cache(indices.graph, "distinct_rows")[indices.ref()] = True


def _ungated(tensor: Any, marked: dict[Any, Any]) -> Any:
    """``tensor``, or the marked tensor behind the ``Identity`` ops TF gates an op's several gradients with."""
    while tensor.op.type == "Identity" and tensor.ref() not in marked:
        tensor = tensor.op.inputs[0]
    return tensor


def distinct_rows(indices: Any) -> bool:
    """Whether ``indices`` (or the tensor a gather's gradient reshaped into them) were marked distinct."""
    import tensorflow as tf

    if not isinstance(indices, tf.Tensor) or tf.executing_eagerly():
        return False
    from strategies._compat import graph_cache

    marked = graph_cache(indices.graph, "distinct_rows")
    indices = _ungated(indices, marked)
    if indices.ref() in marked:
        return True
    # TF's gather gradients give ``reshape(gather.inputs[1], [size])``: the same 1-D ids
    source = indices.op.inputs[0] if indices.op.type == "Reshape" else None
    return source is not None and source.ref() in marked and source.shape.rank == 1


class PartsGradient(NamedTuple):
    """A ``toolkit._rows.gather_parts`` op's gradient: the op (its inputs: the parts' handles, ``which``,
    ``rows``) and the gradient of its output, ``[len(rows), width]``."""

    op: Any
    grad: Any


def mark_parts_gradient(values: Any, whole: PartsGradient, part: int) -> None:
    """Records that ``values`` are part ``part``'s rows of the gradient ``whole`` (``native_tf1_adagrad`` reads it)."""
    from strategies._compat import graph_cache

    graph_cache(values.graph, "parts_gradients")[values.ref()] = (whole, part)


def parts_gradient(values: Any) -> tuple[PartsGradient, int] | None:
    """``(the whole gradient, which part)`` when ``values`` are a part's rows of a ``gather_parts`` gradient."""
    import tensorflow as tf

    if not isinstance(values, tf.Tensor) or tf.executing_eagerly():
        return None
    from strategies._compat import graph_cache

    known = graph_cache(values.graph, "parts_gradients")
    return known.get(_ungated(values, known).ref())


def distinct_row_updates() -> None:
    """TF1 optimizers update rows marked distinct (``mark_distinct_rows``) without summing duplicates first.

    ``Optimizer._resource_apply_sparse_duplicate_indices`` is wrapped once, so it applies to every
    optimizer that keeps TF's own duplicate handling (a ``Unique`` and an ``UnsortedSegmentSum``,
    then ``_resource_apply_sparse``), however the user calls ``minimize``. On distinct indices that
    sum is the identity, so the update is the same; other indices, and optimizers that override the
    method, take TensorFlow's call.
    """
    import tensorflow as tf

    optimizer = tf.compat.v1.train.Optimizer
    original = optimizer.__dict__["_resource_apply_sparse_duplicate_indices"]
    if getattr(original, "_tfdist_distinct", False):
        return

    def _resource_apply_sparse_duplicate_indices(self: Any, grad: Any, handle: Any, indices: Any,
                                                 **kwargs: Any) -> Any:
        if distinct_rows(indices):
            return self._resource_apply_sparse(grad, handle, indices, **kwargs)
        return original(self, grad, handle, indices, **kwargs)

    _resource_apply_sparse_duplicate_indices._tfdist_distinct = True  # type: ignore[attr-defined]
    optimizer._resource_apply_sparse_duplicate_indices = _resource_apply_sparse_duplicate_indices


def _unused_epsilon(var: Any, dtype: Any) -> Any:
    """The kernel's epsilon input (ignored without ``use_epsilon``): one constant per device, not per variable.

    A packed click-through model updates some fifty parts per ps each step; a constant each is as
    many more ops for the ps to run.
    """
    import tensorflow as tf

    from strategies._compat import graph_cache

    graph = var.graph
    key = (var.device, dtype, current_control_flow_context(graph))
    made = graph_cache(graph, "unused_epsilon")
    if key not in made:
        made[key] = tf.constant(0, dtype, name="unused_epsilon")
    return made[key]


class _Fusing(threading.local):
    """The ``gather_parts`` groups the ``apply_gradients`` call running in this thread may update in one op."""

    def __init__(self) -> None:
        self.groups: dict[Any, list[Any]] = {}  # the gather op -> its parts' variables, in its order
        self.built: dict[Any, Any] = {}  # the gather op -> its one update


_FUSING = _Fusing()


def _fusable_groups(pairs: list[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    """The ``gather_parts`` ops every part of which has its own gradient, untouched, among ``pairs``."""
    import tensorflow as tf

    members: dict[Any, dict[int, Any]] = {}
    for grad, var in pairs:
        found = parts_gradient(grad.values) if isinstance(grad, tf.IndexedSlices) else None
        if found is not None:
            members.setdefault(found[0].op, {})[found[1]] = var
    groups = {}
    for op, by_part in members.items():
        count = op.get_attr("N")
        if sorted(by_part) == list(range(count)) and all(
                by_part[i].handle is op.inputs[i] for i in range(count)):
            groups[op] = [by_part[i] for i in range(count)]
    return groups


def native_tf1_adagrad() -> None:
    """TF1's ``AdagradOptimizer`` updates rows with tfdist's native kernels where ``strategies._native`` allows.

    Its ``_resource_apply_sparse`` is wrapped once: inside ``native.kernels_on(tasks)`` (the
    Estimator's between-graph graph, its ps probed), a variable on one of those tasks gets the
    native kernel (TF1's maths, exact ``1 / sqrt`` for TensorFlow's refined approximation);
    anywhere else, and for subclasses that override it, TensorFlow's own call runs. When every
    part read by one ``toolkit._rows.gather_parts`` has its gradient in the same
    ``apply_gradients`` call (``apply_gradients`` is wrapped to find them), one native op updates
    them all, with the same maths.
    """
    import tensorflow as tf

    from strategies import _native as native

    adagrad = tf.compat.v1.train.AdagradOptimizer
    original = adagrad.__dict__["_resource_apply_sparse"]
    if getattr(original, "_tfdist_native", False):
        return
    original_apply = adagrad.__dict__.get("apply_gradients", tf.compat.v1.train.Optimizer.apply_gradients)

    def apply_gradients(self: Any, grads_and_vars: Any, global_step: Any = None, name: Any = None) -> Any:
        pairs = list(grads_and_vars)
        saved = _FUSING.groups, _FUSING.built
        _FUSING.groups, _FUSING.built = _fusable_groups(pairs), {}
        try:
            return original_apply(self, pairs, global_step=global_step, name=name)
        finally:
            _FUSING.groups, _FUSING.built = saved

    def _resource_apply_sparse(self: Any, grad: Any, var: Any, indices: Any) -> Any:
        if not native.usable_on(var.device):
            return original(self, grad, var, indices)
        lr = tf.cast(self._learning_rate_tensor, grad.dtype)
        found = parts_gradient(grad)
        group = _FUSING.groups.get(found[0].op) if found is not None else None
        if found is not None and group is not None:
            op = found[0].op
            if op not in _FUSING.built:  # the first part's call updates all; the others return that op
                count = op.get_attr("N")
                _FUSING.built[op] = native.sparse_apply_adagrad_parts(
                    [v.handle for v in group], [self.get_slot(v, "accumulator").handle for v in group], lr,
                    found[0].grad, op.inputs[count], op.inputs[count + 1])
            return _FUSING.built[op]
        accumulator = self.get_slot(var, "accumulator")
        return native.sparse_apply_adagrad(var.handle, accumulator.handle, lr, _unused_epsilon(var, grad.dtype),
                                           grad, indices, use_epsilon=False)

    _resource_apply_sparse._tfdist_native = True  # type: ignore[attr-defined]
    adagrad._resource_apply_sparse = _resource_apply_sparse
    adagrad.apply_gradients = apply_gradients


def colocated_global_step_read(graph: Any) -> Any:
    """The graph's global-step read that TF's step hooks fetch each step, built on the global step's device.

    TF builds it (a ``cond`` on the step being initialised, then ``+ 0``) wherever the first hook's
    ``begin`` runs: on a between-graph worker, the predicate on the ps and the rest on the worker, so
    each step sent the predicate, both branches' values and the cond's pivots between the two (six
    transfers for one integer). Built beside the variable, only the value crosses. Once per graph;
    the hooks then find it in the graph's collection.
    """
    import tensorflow as tf
    from tensorflow.python.training import training_util

    step = training_util.get_global_step(graph)
    if step is None:
        return None
    with graph.as_default(), tf.compat.v1.colocate_with(step):
        return training_util._get_or_create_global_step_read(graph)


def loss_scaled_by_optimizer(graph: Any) -> bool:
    """Whether a TF1 optimizer in ``graph`` divided the per-replica loss (then the reported loss is their mean)."""
    return bool(getattr(graph, "_is_loss_scaled_by_optimizer", False))


def missing_symbols() -> list[str]:
    """The private TensorFlow attributes fenced here that the installed TensorFlow no longer has."""
    import tensorflow as tf

    from strategies import _compat as strategies_compat

    v1 = tf.compat.v1
    missing = []
    with tf.Graph().as_default():
        v1.train.get_or_create_global_step()
        optimizer = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=1)
        variable = v1.Variable(1.0)
        optimizer.minimize(variable * variable, global_step=v1.train.get_global_step())
        if sync_optimizers([optimizer.make_session_run_hook(is_chief=True)]) != [optimizer]:
            missing.append(f"SyncReplicasOptimizer.make_session_run_hook(...).{SYNC_HOOK_ATTRIBUTE}")
    for attribute in ("_update_input", "_get_control_flow_context"):
        if not hasattr(tf.Operation, attribute):
            missing.append(f"tf.Operation.{attribute}")
    try:
        with tf.Graph().as_default():
            named_variable("tfdist_fence_check", tf.float32, [], trainable=False)
        named_variable("tfdist_fence_check", tf.float32, [], trainable=False)
    except (AttributeError, ImportError, TypeError) as exc:
        missing.append(f"tensorflow.python.ops.resource_variable_ops (BaseResourceVariable, "
                       f"_set_handle_shapes_and_types, handle_data_util): {exc}")
    try:
        with tf.Graph().as_default(), automatic_control_dependencies() as ordered:
            variable = tf.Variable(1.0)
            variable.assign_add(1.0)
        if not ordered.ops_which_must_run:
            missing.append("AutomaticControlDependencies().ops_which_must_run (empty)")
    except (AttributeError, ImportError) as exc:
        missing.append(f"tensorflow.python.framework.auto_control_deps.AutomaticControlDependencies: {exc}")
    for attribute in ("_resource_apply_sparse_duplicate_indices", "_resource_apply_sparse"):
        if not hasattr(v1.train.AdagradOptimizer, attribute):
            missing.append(f"tf.compat.v1.train.AdagradOptimizer.{attribute}")
    if not hasattr(tf.distribute.OneDeviceStrategy("/cpu:0"), "_scale_loss_for_estimator_enabled"):
        missing.append("tf.distribute.Strategy._scale_loss_for_estimator_enabled")
    try:
        with tf.Graph().as_default() as graph:
            v1.train.get_or_create_global_step()
            colocated_global_step_read(graph)
    except (AttributeError, ImportError) as exc:
        missing.append(f"tensorflow.python.training.training_util._get_or_create_global_step_read: {exc}")
    v1_column = v1.feature_column.numeric_column("x")
    for attribute in ("_parse_example_spec", "_variable_shape"):
        if not hasattr(v1_column, attribute):
            missing.append(f"tf.compat.v1.feature_column.numeric_column(...).{attribute}")
    try:
        with tf.Graph().as_default():
            hashed = v1.feature_column.categorical_column_with_hash_bucket("x", 5)
            categorical_ids(hashed, {"x": tf.constant([["a"]])})
    except (AttributeError, ImportError) as exc:
        missing.append(f"feature_column._LazyBuilder / _CategoricalColumn._get_sparse_tensors: {exc}")
    return missing + strategies_compat.missing_symbols()
