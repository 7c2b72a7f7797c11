"""A Keras 3 optimizer's ``apply_gradients`` inside an Estimator graph trains as its ``tf.compat.v1.train`` twin.

Keras 3 optimizers update eager variables; in a TF1 graph their
``apply_gradients`` fails with TensorFlow's raw ``TypeError`` (or, in a process
in graph mode, builds no update op). TF 2's Estimator guide calls
``opt.apply_gradients(zip(gradients, variables))`` inside a ``model_fn``, so in
the graphs the Estimator builds (and only there: each such graph is marked) a
Keras 3 ``Adagrad``/``Adam``/``Ftrl``/``RMSprop``/``SGD`` becomes the v1
optimizer with the same hyper-parameters (``canned._keras_optimizers``), one per
optimizer object and graph, and ``apply_gradients`` returns its update op. It
does not advance the global step (Keras' did not either); the guide adds
``global_step.assign_add(1)`` itself. Any other Keras 3 optimizer, or one with
options a TF1 optimizer cannot honour, raises ``TrainingError`` naming it.
"""
from __future__ import annotations

import functools
import weakref
from typing import Any

__all__ = ["in_estimator_graph", "install", "mark_estimator_graph"]

_ESTIMATOR_GRAPHS: weakref.WeakSet[Any] = weakref.WeakSet()
_TWINS: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def mark_estimator_graph(graph: Any) -> Any:
    """Marks ``graph`` as one the Estimator builds (Keras 3 optimizers map to v1 in it); returns it."""
    install()
    _ESTIMATOR_GRAPHS.add(graph)
    return graph


def in_estimator_graph() -> bool:
    import tensorflow as tf

    return not tf.executing_eagerly() and tf.compat.v1.get_default_graph() in _ESTIMATOR_GRAPHS


def _twin(optimizer: Any, graph: Any) -> Any:
    import concurrent.futures

    from toolkit.estimator.canned._errors import CannedError
    from toolkit.estimator.canned._keras_optimizers import from_keras
    from toolkit.training import TrainingError

    twins = _TWINS.setdefault(graph, {})
    if id(optimizer) not in twins:
        try:
            # the copy is made and read eagerly (the default graph is per thread), its v1 twin built in the graph
            cls, kwargs = _settings(optimizer)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                builder = pool.submit(lambda: from_keras("optimizer", cls(**kwargs))).result()
            twins[id(optimizer)] = (optimizer, builder())
        except CannedError as exc:
            raise TrainingError(f"A Keras 3 optimizer's apply_gradients() in an Estimator model_fn: {exc}",
                                field="optimizer") from exc
    return twins[id(optimizer)][1]


def _settings(optimizer: Any) -> tuple[Any, dict[str, Any]]:
    """The class and constructor arguments of an optimizer made inside the graph, which keeps its learning
    rate in a graph variable (``get_config`` cannot read it; its constant initial value is the rate)."""
    import inspect

    import tensorflow as tf

    names = [n for n in inspect.signature(type(optimizer).__init__).parameters
             if n not in ("self", "kwargs", "learning_rate")]
    kwargs = {n: getattr(optimizer, n) for n in names if hasattr(optimizer, n)}
    from toolkit._compat.keras import graph_learning_rate

    initial = graph_learning_rate(optimizer)
    if initial is not None:
        kwargs["learning_rate"] = float(tf.get_static_value(initial))
    return type(optimizer), kwargs


def _variable(value: Any) -> Any:
    """The TensorFlow variable behind a Keras 3 variable (a tf.Variable as it is)."""
    import tensorflow as tf

    return value if isinstance(value, tf.Variable) else getattr(value, "value", value)


def _not_checkpointed(optimizer: Any) -> None:
    """The Keras optimizer's own variables (its step, its rate) are unused here: local, never checkpointed."""
    import tensorflow as tf

    v1 = tf.compat.v1
    own = {id(_variable(v)) for v in optimizer.variables}
    saved = v1.get_collection_ref(v1.GraphKeys.GLOBAL_VARIABLES)
    moved = [v for v in saved if id(v) in own]
    saved[:] = [v for v in saved if id(v) not in own]
    for variable in moved:
        v1.add_to_collection(v1.GraphKeys.LOCAL_VARIABLES, variable)


def _track_twin_state(optimizer: Any, twin: Any) -> None:
    """The twin's slots and accumulators become the Keras optimizer's own tracked state, so a
    ``tf.train.Checkpoint(optimizer=opt)`` used as the Scaffold's saver (the Estimator guide's object-based
    checkpoints) saves them and restores them when training resumes: otherwise they are missing from the
    checkpoint and the resumed session finds them uninitialised."""
    optimizer.tfdist_v1_state = {variable.op.name.replace("/", "."): variable for variable in twin.variables()}


def install() -> None:
    """Wraps ``keras.optimizers.Optimizer.apply_gradients`` once; eager code and other graphs are untouched."""
    import keras
    import tensorflow as tf

    original = keras.optimizers.Optimizer.apply_gradients
    if getattr(original, "tfdist_estimator_twin", False):
        return

    @functools.wraps(original)
    def apply_gradients(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        if graph is None or graph not in _ESTIMATOR_GRAPHS:
            return original(self, grads_and_vars, *args, **kwargs)
        pairs = [(gradient, _variable(variable)) for gradient, variable in grads_and_vars]
        _not_checkpointed(self)
        twin = _twin(self, graph)
        update = twin.apply_gradients(pairs)
        _track_twin_state(self, twin)
        return update

    apply_gradients.tfdist_estimator_twin = True  # type: ignore[attr-defined]
    keras.optimizers.Optimizer.apply_gradients = apply_gradients
