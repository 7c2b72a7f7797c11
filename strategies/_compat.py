"""The fence around the TensorFlow and Keras internals that ``strategies`` relies on.

Everything here reaches beyond the documented surface of TensorFlow 2.21 or
Keras 3.15: the checkpoint machinery a sharded table plugs into, the tape and
name-scope state device maps read, a layer's children, the per-instance
method replacements that pin a layer's call or an optimizer's slots to a
device, and the threads of a ``ClusterCoordinator`` that must be stopped
before the interpreter exits. Each symbol is named in ``SYMBOLS``; ``missing_symbols()`` (and its
unit test) lists the ones an upgrade removed, and a module that needs a
missing one fails at import with the symbol's name instead of deep inside a
training run. ``toolkit._compat`` builds on this module (``strategies``
cannot import ``toolkit``).
"""
from __future__ import annotations

import importlib
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

__all__ = ["SYMBOLS", "Trackable", "SaveableObject", "SaveSpec", "ResourceVariableSaveable",
           "child_layers", "graph_cache", "keras_name_scope_stack", "keras_variable_of", "missing_symbols",
           "replace_method", "pss_cluster", "pss_partitioning", "stop_coordinator_threads", "tape_could_record"]

#: ``module:attribute`` of every private symbol below, or ``Class.member`` for private members.
SYMBOLS = (
    "tensorflow.python.trackable.base:Trackable",
    "tensorflow.python.training.saving.saveable_object:SaveableObject",
    "tensorflow.python.training.saving.saveable_object:SaveSpec",
    "tensorflow.python.training.saving.saveable_object_util:ResourceVariableSaveable",
    "tensorflow.python.eager.record:could_possibly_record",
    "keras.src.backend.common.global_state:get_global_attribute",
    "keras.layers.Layer._flatten_layers",
    "keras.layers.Layer.call",
    "keras.optimizers.Optimizer.add_variable_from_reference",
    "tensorflow.python.distribute.coordinator.cluster_coordinator:Cluster",
    "tensorflow.python.distribute.coordinator.cluster_coordinator:WorkerPreemptionHandler",
)

#: How TensorFlow names a ``ClusterCoordinator``'s per-worker closure threads (``Worker.__init__``).
_WORKER_THREAD_PREFIX = "WorkerClosureProcessingLoop-"


def _find(symbol: str) -> Any | None:
    if ":" in symbol:
        module, attribute = symbol.split(":")
        try:
            return getattr(importlib.import_module(module), attribute, None)
        except ImportError:
            return None
    owner, member = symbol.rsplit(".", 1)
    parts = owner.split(".")
    value: Any = {"keras": keras, "tensorflow": tf}[parts[0]]
    for part in parts[1:]:
        value = getattr(value, part, None)
    return getattr(value, member, None)


def _load(symbol: str) -> Any:
    found = _find(symbol)
    if found is None:
        raise ImportError(
            f"tfdist needs {symbol}, which TensorFlow {tf.__version__} / Keras {keras.__version__} does not have. "
            "tfdist is tested with TensorFlow 2.21 and Keras 3.15; install those (pip install 'tfdist'), or "
            "update strategies/_compat.py for this version.")
    return found


def missing_symbols() -> list[str]:
    """The symbols of ``SYMBOLS`` that the installed TensorFlow/Keras no longer has (or no longer behave so)."""
    missing = [symbol for symbol in SYMBOLS if _find(symbol) is None]
    if not _initializers_close_over_their_variable():
        missing.append("keras.Variable's tf.Variable initial_value closing over the keras.Variable")
    source = inspect.getsource(_pss_extended_class().__init__)
    for attribute in ("_variable_partitioner", "_num_ps"):
        if f"self.{attribute} = " not in source:
            missing.append(f"tensorflow ParameterServerStrategy.extended.{attribute}")
    if "self._cluster_resolver = " not in inspect.getsource(tf.distribute.ParameterServerStrategy.__init__):
        missing.append("tensorflow.distribute.ParameterServerStrategy()._cluster_resolver")
    return missing


def _pss_extended_class() -> Any:
    from tensorflow.python.distribute import parameter_server_strategy_v2

    return parameter_server_strategy_v2.ParameterServerStrategyV2Extended


def pss_partitioning(strategy: tf.distribute.Strategy) -> tuple[Any, int]:
    """(the variable partitioner or None, the number of ps) of a ParameterServerStrategy.

    TensorFlow keeps both private; sharded tables split themselves over the ps when the strategy has no
    partitioner (one shard per ps, never the dense variables).
    """
    extended = strategy.extended
    return getattr(extended, "_variable_partitioner", None), int(getattr(extended, "_num_ps", 0) or 0)


def _initializers_close_over_their_variable() -> bool:
    seen: list[Any] = []

    def creator(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        seen.append(keras_variable_of(kwargs.get("initial_value")))
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        variable = keras.Variable(initializer=keras.initializers.Zeros(), shape=(2,), name="probe")
    return any(found is variable for found in seen)


# Checkpointing of sharded tables: base classes, so they are needed at import time.
if TYPE_CHECKING:  # the same classes, named so that a type checker can use them as types
    from tensorflow.python.trackable.base import Trackable
    from tensorflow.python.training.saving.saveable_object import SaveableObject, SaveSpec
    from tensorflow.python.training.saving.saveable_object_util import ResourceVariableSaveable
else:
    Trackable = _load("tensorflow.python.trackable.base:Trackable")
    SaveableObject = _load("tensorflow.python.training.saving.saveable_object:SaveableObject")
    SaveSpec = _load("tensorflow.python.training.saving.saveable_object:SaveSpec")
    ResourceVariableSaveable = _load(
        "tensorflow.python.training.saving.saveable_object_util:ResourceVariableSaveable")
_could_possibly_record: Callable[[], bool] = _load("tensorflow.python.eager.record:could_possibly_record")
_get_global_attribute: Callable[[str], Any] = _load("keras.src.backend.common.global_state:get_global_attribute")


def tape_could_record() -> bool:
    """Whether a gradient tape may be watching (TensorFlow's own cheap check before recording an op)."""
    return bool(_could_possibly_record())


def keras_name_scope_stack() -> list[Any]:
    """Keras' stack of open name scopes, outermost first (each ``.caller`` is the layer being built)."""
    return list(_get_global_attribute("name_scope_stack") or [])


def child_layers(layer: keras.layers.Layer, *, recursive: bool) -> Iterator[keras.layers.Layer]:
    """The layers inside ``layer`` (not itself), as Keras tracks them, including nested models' layers."""
    return iter(layer._flatten_layers(include_self=False, recursive=recursive))


def keras_variable_of(initial_value: object) -> keras.Variable | None:
    """The Keras variable whose backing ``tf.Variable`` is being created from ``initial_value``, if any.

    Keras 3 creates the backing ``tf.Variable`` from a closure over the Keras
    variable. When a layer is built symbolically (subclassed models), that
    happens *after* the layer's name scope has closed, so the variable's own
    ``path`` is the only reliable record of which layer it belongs to.
    """
    for cell in getattr(initial_value, "__closure__", None) or ():
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(content, keras.Variable):
            return content
    return None


def replace_method(instance: Any, name: str, method: Callable[..., Any]) -> None:
    """Replaces ``instance.<name>`` on this one object (a layer's ``call``, an optimizer's slot factory).

    Keras looks these methods up on the instance, so the replacement is seen by
    ``model.fit``'s traced function too; the class and other instances are left alone.
    """
    setattr(instance, name, method)


def graph_cache(graph: tf.Graph, name: str) -> dict[Any, Any]:
    """A dict kept on ``graph`` itself (an attribute of ours): it lives and dies with the graph.

    A cache of a graph's tensors kept anywhere else (even a ``WeakKeyDictionary`` keyed by the
    graph) holds the graph alive through those tensors.
    """
    attribute = f"_tfdist_{name}"
    cache = getattr(graph, attribute, None)
    if cache is None:
        cache = {}
        setattr(graph, attribute, cache)
    return cache


def stop_coordinator_threads(strategy: tf.distribute.Strategy, timeout: float) -> list[str]:
    """Lets ``strategy``'s ``ClusterCoordinator`` go idle, then stops its threads; at most ``timeout`` s.

    The coordinator runs its closures and its worker-failure recovery in daemon
    threads, and ``join()`` does not wait for a recovery: after a worker was
    restarted, the chief can finish training while the failure handler still
    updates the cluster, or that worker's thread still re-creates its datasets
    there, inside TensorFlow's C++ code. If the interpreter exits then, the
    thread is unwound on its way back into Python and the process aborts
    (``FATAL: exception not rethrown``, SIGABRT) although training succeeded.

    So the chief first waits until no cluster update is pending and every
    worker thread waits for work that will not come (in the closure queue's
    ``get``, with nothing queued for it); a recovery still in flight ends
    against live servers. Then the failure handler and the closure queue stop,
    and every thread returns. Without a recovery in flight this takes
    milliseconds; with one, as long as the worker takes to come back.

    Returns:
        The names of the threads still running after ``timeout``; [] also when
        ``strategy`` has no coordinator.
    """
    cluster = getattr(getattr(strategy, "_cluster_coordinator", None), "_cluster", None)
    if cluster is None:
        return []
    deadline = time.monotonic() + timeout
    workers = [thread for thread in threading.enumerate() if thread.name.startswith(_WORKER_THREAD_PREFIX)]
    while not _coordinator_idle(cluster, workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    handler = cluster.failure_handler
    handler.stop()
    handler_thread = getattr(handler, "_preemption_handler_thread", None)
    if handler_thread is not None:
        handler_thread.join(max(deadline - time.monotonic(), 0.0))
    cluster.stop()
    for thread in workers:
        thread.join(max(deadline - time.monotonic(), 0.0))
    return [thread.name for thread in [handler_thread, *workers] if thread is not None and thread.is_alive()]


def _coordinator_idle(cluster: Any, workers: list[threading.Thread]) -> bool:
    """No cluster update pending, no closure queued, and every worker thread waiting in the queue's ``get``."""
    queue = cluster.closure_queue
    if cluster.failure_handler._cluster_due_for_update_or_finish.is_set() or not queue._queue.empty():
        return False
    if any(not tagged.empty() for tagged in list(queue._tagged_queue.values())):
        return False
    frames = sys._current_frames()
    return all(_waiting_for_a_closure(frames.get(thread.ident or -1)) for thread in workers if thread.is_alive())


def _waiting_for_a_closure(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "get" and frame.f_code.co_filename.endswith("cluster_coordinator.py"):
            return True
        frame = frame.f_back
    return False


def pss_cluster(strategy: tf.distribute.Strategy) -> dict[str, list[str]] | None:
    """The TF2 cluster of a ParameterServerStrategy (built by ``make_strategy`` or by hand), else None.

    TensorFlow keeps the resolver it was built from private (``strategy.cluster_resolver`` is None), and
    the chief's goodbye needs the addresses of every server.
    """
    if not isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return None
    resolver = getattr(strategy, "_cluster_resolver", None)
    if resolver is None:
        return None
    from strategies._cluster import tf2_cluster

    spec = resolver.cluster_spec()
    return tf2_cluster({job: tuple(spec.job_tasks(job)) for job in spec.jobs})
