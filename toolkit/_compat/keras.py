"""The fence around the Keras internals that ``toolkit`` relies on.

Everything here touches Keras beyond its documented surface: replacing
``keras.Model``'s ``compile``/``fit``/``evaluate``/``predict`` (and putting the
originals back) for distributed Keras, reading private attributes of a few
metrics, walking a model's layers, marking an exception so Keras re-raises
it as it is, and pointing a ``keras.Variable`` at another TensorFlow variable
(between-graph workers bind their model and optimizer to the chief's
variables). A Keras upgrade that removes one of them fails ``missing_symbols``
(and its unit test) with the symbol's name, instead of failing deep inside a
training run. The internals ``strategies`` needs are fenced in
``strategies._compat``, whose symbols ``missing_symbols`` also reports.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import keras

from strategies import _compat as _strategies_compat

__all__ = ["PATCHED_METHODS", "install", "uninstall", "installed", "original", "uses_base_train_step",
           "auc_from_logits", "bind_variable", "child_layers", "clone_uncompiled", "compile_arguments",
           "count_atomically", "mean_metric_fn", "reraise_unchanged", "missing_symbols", "wrap_embedding_build",
           "DISTRIBUTION_LIB_FUNCTIONS",
           "install_distribution_lib", "uninstall_distribution_lib", "original_set_distribution",
           "current_name_path", "own_variables", "original_add_weight", "original_optimizer_build",
           "layout_map_of", "distribution_lib_installed",
           "fresh_layer_names", "graph_learning_rate", "trusted_deserialization"]

#: the ``keras.Model`` methods replaced while distributed Keras is enabled.
PATCHED_METHODS = ("compile", "fit", "evaluate", "predict")

_originals: dict[str, Callable[..., Any]] = {}
_inherited: set[str] = set()  # methods keras.Model inherits rather than defines


def install(replacements: Mapping[str, Callable[..., Any]]) -> None:
    """Replaces ``keras.Model.<name>`` by ``replacements[name](original, model, *args, **kwargs)``."""
    if _originals:
        return
    for name in PATCHED_METHODS:
        base = getattr(keras.Model, name)
        _originals[name] = base
        if name not in vars(keras.Model):
            _inherited.add(name)
        handler = replacements[name]

        def method(self: Any, *args: Any, _handler: Any = handler, _base: Any = base, **kwargs: Any) -> Any:
            return _handler(_base, self, *args, **kwargs)

        setattr(keras.Model, name, functools.wraps(base)(method))


def uninstall() -> None:
    """Puts Keras' own methods back."""
    for name, base in _originals.items():
        if name in _inherited:
            delattr(keras.Model, name)
        else:
            setattr(keras.Model, name, base)
    _originals.clear()
    _inherited.clear()


def installed() -> bool:
    return bool(_originals)


def original(name: str) -> Callable[..., Any]:
    """Keras' own ``keras.Model.<name>`` (whether or not it is currently replaced)."""
    return _originals.get(name) or getattr(keras.Model, name)


def uses_base_train_step(model: keras.Model) -> bool:
    """False when the model overrides ``train_step`` (the engine would not run that code)."""
    return type(model).train_step is keras.Model.train_step


def compile_arguments(model: keras.Model) -> dict[str, Any] | None:
    """The arguments ``model.compile`` was last called with, as given (None: never compiled).

    Keras keeps them unserialized in ``_compile_config.config``; its public
    ``get_compile_config()`` serializes them, which loses functions and objects
    without a config.
    """
    if not getattr(model, "compiled", False):
        return None
    return dict(model._compile_config.config)


def clone_uncompiled(model: keras.Model) -> keras.Model:
    """``keras.models.clone_model(model)`` without compiling the clone.

    Keras compiles a clone of a compiled model from the serialized compile config, which reads
    the optimizer's variables and fails inside a ``tf.Graph``; Keras decides on ``model.compiled``.
    """
    compiled = model.compiled
    model.compiled = False
    try:
        return keras.models.clone_model(model)
    finally:
        model.compiled = compiled


def auc_from_logits(metric: keras.metrics.AUC) -> bool:
    return bool(metric._from_logits)


def child_layers(model: keras.layers.Layer, *, recursive: bool = True) -> Iterator[keras.layers.Layer]:
    """The layers inside ``model`` (not itself), nested models' layers included when ``recursive``."""
    return _strategies_compat.child_layers(model, recursive=recursive)


def bind_variable(variable: keras.Variable, value: Any) -> None:
    """Makes ``variable`` read and write the TensorFlow variable ``value`` (Keras keeps it in ``_value``)."""
    variable._value = value


def count_atomically(variable: keras.Variable) -> None:
    """Makes ``variable.assign_add`` one atomic op on its TensorFlow variable.

    Keras' ``assign_add`` is a read and a write, so an optimizer's ``iterations`` loses increments
    when workers step at once; its optimizers count through ``iterations.assign_add``.
    """
    import tensorflow as tf

    inner = variable._value

    def assign_add(value: Any) -> Any:
        with tf.device(inner.device):  # where the counter lives: no transfer of the increment
            return inner.assign_add(tf.cast(value, inner.dtype), read_value=False)

    variable.assign_add = assign_add


def adagrad_accumulator(optimizer: keras.optimizers.Adagrad, variable: keras.Variable) -> keras.Variable:
    """The accumulator a built Keras ``Adagrad`` keeps for ``variable`` (Keras lists them in ``_accumulators``)."""
    return optimizer._accumulators[optimizer._get_variable_index(variable)]


def mean_metric_fn(metric: keras.metrics.MeanMetricWrapper) -> Callable[[Any, Any], Any]:
    """The per-example function a ``MeanMetricWrapper`` (``SparseCategoricalAccuracy()``...) averages."""
    return functools.partial(metric._fn, **metric._fn_kwargs)


#: set on an exception raised in ``Layer.call``, Keras re-raises it unchanged (not wrapped in a RuntimeError).
_CALL_INFO_INJECTED = "_keras_call_info_injected"


def reraise_unchanged(error: BaseException) -> BaseException:
    """Marks ``error`` so that Keras lets it out of ``Layer.__call__`` as it is; returns it."""
    setattr(error, _CALL_INFO_INJECTED, True)
    return error


# --- keras.distribution on the TensorFlow backend (toolkit.keras_distribution) -----------------------------
#: the functions of Keras' TensorFlow ``distribution_lib`` that ``install_distribution_lib`` provides.
DISTRIBUTION_LIB_FUNCTIONS = ("list_devices", "get_device_count", "initialize", "num_processes", "process_id",
                              "distribute_tensor", "distribute_variable", "distribute_data_input",
                              "_to_backend_mesh", "_to_backend_layout")
_distribution_originals: dict[tuple[object, str], Any] = {}


def _distribution_modules() -> tuple[Any, Any, Any]:
    import keras.distribution as public
    from keras.src.backend import distribution_lib as backend_lib
    from keras.src.distribution import distribution_lib as frontend

    return backend_lib, frontend, public


def original_set_distribution() -> Callable[[Any], None]:
    """Keras' own ``set_distribution`` (whether or not it is currently replaced)."""
    _, frontend, _ = _distribution_modules()
    return _distribution_originals.get((frontend, "set_distribution"), frontend.set_distribution)


def original_add_weight() -> Callable[..., Any]:
    return _distribution_originals.get((keras.layers.Layer, "add_weight"), keras.layers.Layer.add_weight)


def original_optimizer_build() -> Callable[..., Any]:
    return _distribution_originals.get((keras.optimizers.Optimizer, "build"), keras.optimizers.Optimizer.build)


def _replace(owner: object, name: str, value: Any) -> None:
    _distribution_originals.setdefault((owner, name), getattr(owner, name, None))
    setattr(owner, name, value)


def install_distribution_lib(functions: Mapping[str, Callable[..., Any]], *,
                             set_distribution: Callable[[Any], None], add_weight: Callable[..., Any],
                             optimizer_build: Callable[..., Any]) -> None:
    """Puts tfdist's TensorFlow ``distribution_lib`` behind ``keras.distribution``.

    Keras' frontend (``keras.src.distribution.distribution_lib``) calls its
    backend module's functions by attribute, so replacing them there is
    enough; ``set_distribution`` is replaced in the frontend (which
    ``Distribution.scope()`` calls) and in the public ``keras.distribution``.
    ``Layer.add_weight`` and ``Optimizer.build`` are replaced on the classes.
    """
    if _distribution_originals:
        return
    backend_lib, frontend, public = _distribution_modules()
    for name in DISTRIBUTION_LIB_FUNCTIONS:
        _replace(backend_lib, name, functions[name])
    _replace(frontend, "set_distribution", set_distribution)
    _replace(public, "set_distribution", set_distribution)
    _replace(keras.layers.Layer, "add_weight", add_weight)
    _replace(keras.optimizers.Optimizer, "build", optimizer_build)


def uninstall_distribution_lib() -> None:
    for (owner, name), value in _distribution_originals.items():
        if value is None:
            delattr(owner, name)
        else:
            setattr(owner, name, value)
    _distribution_originals.clear()


def distribution_lib_installed() -> bool:
    return bool(_distribution_originals)


def current_name_path() -> str:
    """The path Keras gives a variable created here (without its own name): its open ``name_scope``s."""
    from keras.src.backend.common.name_scope import current_path

    return str(current_path())


def own_variables(layer: keras.layers.Layer) -> list[keras.Variable]:
    """The variables ``layer`` itself created (not its sublayers'), in creation order per kind."""
    return list(layer._trainable_variables) + list(layer._non_trainable_variables)


def layout_map_of(distribution: Any) -> Any:
    """A ``ModelParallel``'s ``LayoutMap`` (Keras keeps it in ``_layout_map``; None for other distributions)."""
    return getattr(distribution, "_layout_map", None)


def graph_learning_rate(optimizer: Any) -> Any:
    """The learning rate's initial-value tensor of a Keras 3 optimizer made inside a TF1 graph (or None)."""
    rate = getattr(optimizer, "_learning_rate", None)
    return getattr(getattr(rate, "value", None), "initial_value", None)


@contextlib.contextmanager
def fresh_layer_names() -> Iterator[None]:
    """Keras' automatic layer names (``dense``, ``dense_1``...) counted afresh inside, as Keras 2 counted them
    per graph: each Estimator graph a model_fn builds names its layers, and so its variables, the same way,
    so a checkpoint written by train() restores in evaluate()'s graph."""
    from keras.src.backend.common import global_state

    saved = global_state.get_global_attribute("object_name_uids")
    global_state.set_global_attribute("object_name_uids", None)
    try:
        yield
    finally:
        global_state.set_global_attribute("object_name_uids", saved)


def trusted_deserialization() -> Any:
    """A scope where Keras rebuilds ``Lambda`` layers holding Python functions (its safe mode off).

    For a config read from a live model object (``model_to_estimator`` rebuilds the
    user's own model in each Estimator graph, as TF's clone did), not from a file.
    """
    from keras.src.saving import serialization_lib

    return serialization_lib.SafeModeScope(safe_mode=False)


def missing_symbols() -> list[str]:
    """The Keras (and, through ``strategies._compat``, TensorFlow) symbols fenced here that are gone."""
    missing = [f"keras.Model.{name}" for name in (*PATCHED_METHODS, "train_step") if not hasattr(keras.Model, name)]
    try:
        with fresh_layer_names():
            fresh = keras.layers.Dense(1).name
        if fresh != "dense":
            missing.append(f"keras.src.backend.common.global_state object_name_uids (a fresh layer was named {fresh})")
    except (ImportError, AttributeError) as exc:
        missing.append(f"keras.src.backend.common.global_state.get/set_global_attribute: {exc}")
    checks = {
        "keras.metrics.SparseCategoricalAccuracy()._fn": lambda: keras.metrics.SparseCategoricalAccuracy(),
        "keras.metrics.SparseCategoricalAccuracy()._fn_kwargs": lambda: keras.metrics.SparseCategoricalAccuracy(),
        "keras.metrics.AUC()._from_logits": lambda: keras.metrics.AUC(),
        "keras.metrics.AUC().thresholds": lambda: keras.metrics.AUC(),
        "keras.metrics.AUC().curve": lambda: keras.metrics.AUC(),
        "keras.metrics.AUC().summation_method": lambda: keras.metrics.AUC(),
        "keras.metrics.Precision().thresholds": lambda: keras.metrics.Precision(),
        "keras.metrics.Precision().top_k": lambda: keras.metrics.Precision(),
        "keras.metrics.Precision().class_id": lambda: keras.metrics.Precision(),
        "keras.metrics.MeanIoU().sparse_y_pred": lambda: keras.metrics.MeanIoU(num_classes=2),
        "keras.metrics.MeanIoU().sparse_y_true": lambda: keras.metrics.MeanIoU(num_classes=2),
        "keras.metrics.MeanIoU().ignore_class": lambda: keras.metrics.MeanIoU(num_classes=2),
        "keras.callbacks.BackupAndRestore().backup_dir": lambda: keras.callbacks.BackupAndRestore("unused"),
        "keras.callbacks.BackupAndRestore().save_freq": lambda: keras.callbacks.BackupAndRestore("unused"),
        "keras.callbacks.BackupAndRestore().delete_checkpoint": lambda: keras.callbacks.BackupAndRestore("unused"),
    }
    for symbol, make in checks.items():
        attribute = symbol.rsplit(".", 1)[1]
        if not hasattr(make(), attribute):
            missing.append(symbol)
    try:
        trusted_deserialization()
    except (ImportError, AttributeError) as exc:
        missing.append(f"keras.src.saving.serialization_lib.SafeModeScope: {exc}")
    if not _keeps_compile_arguments():
        missing.append("keras.Model.compile keeping its arguments in _compile_config.config")
    if not _binds_variables():
        missing.append("keras.Variable()._value")
    if not _counts_atomically():
        missing.append("keras.optimizers.Optimizer.apply counting through iterations.assign_add")
    if not _finds_adagrad_accumulators():
        missing.append("keras.optimizers.Adagrad()._accumulators by _get_variable_index")
    if not _embedding_builds_through_its_class():
        missing.append("keras.layers.Embedding: build bound per instance at construction, weight in _embeddings")
    missing += _missing_distribution_symbols()
    if not _reraises_marked_errors():
        missing.append(f"keras.layers.Layer.__call__ honouring {_CALL_INFO_INJECTED}")
    return missing + _strategies_compat.missing_symbols()


def wrap_embedding_build(wrapper: Callable[..., Any]) -> None:
    """Replaces ``keras.layers.Embedding.build`` by ``wrapper(original_build, layer, input_shape)``, once.

    Keras binds ``build`` on each layer when it is constructed (``Layer.__new__``), so layers made
    after this call build through ``wrapper``; older layers keep Keras' own.
    """
    embedding = keras.layers.Embedding
    if getattr(embedding.build, "_tfdist_wrapped", False):
        return
    original_build = embedding.build

    def build(self: Any, input_shape: Any = None) -> None:
        return wrapper(original_build, self, input_shape)

    build._tfdist_wrapped = True  # type: ignore[attr-defined]
    embedding.build = build  # type: ignore[method-assign]


def _embedding_builds_through_its_class() -> bool:
    layer = keras.layers.Embedding(3, 2)
    layer.build()
    return hasattr(layer, "_embeddings") and callable(getattr(keras.layers.Embedding, "build", None))


def _keeps_compile_arguments() -> bool:
    loss = keras.losses.MeanSquaredError()
    try:
        model = keras.Sequential([keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss=loss, steps_per_execution=3)
        arguments = compile_arguments(model)
    except Exception:  # any failure means the internals moved
        return False
    return arguments is not None and arguments.get("loss") is loss and arguments.get("steps_per_execution") == 3


def _binds_variables() -> bool:
    import tensorflow as tf

    variable, other = keras.Variable(1.0), tf.Variable(2.0)
    if not hasattr(variable, "_value"):
        return False
    bind_variable(variable, other)
    variable.assign(3.0)
    return float(other.numpy()) == 3.0 and float(variable.numpy()) == 3.0


def _finds_adagrad_accumulators() -> bool:
    optimizer, weight = keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.25), keras.Variable([1.0, 2.0])
    optimizer.build([weight])
    try:
        accumulator = adagrad_accumulator(optimizer, weight)
    except (AttributeError, IndexError, KeyError):
        return False
    return tuple(accumulator.shape) == (2,) and float(accumulator.numpy()[0]) == 0.25


def _counts_atomically() -> bool:
    import tensorflow as tf

    optimizer, weight = keras.optimizers.SGD(0.1), keras.Variable(1.0)
    optimizer.build([weight])
    counter = tf.Variable(tf.constant(0, optimizer.iterations.dtype))
    bind_variable(optimizer.iterations, counter)
    count_atomically(optimizer.iterations)
    optimizer.apply([tf.constant(1.0)], [weight])
    return int(counter.numpy()) == 1 and "assign_add" in vars(optimizer.iterations)


class _FieldError(Exception):
    """Like our errors, it takes (field, message), which Keras cannot rebuild: unmarked, it becomes a RuntimeError."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _reraises_marked_errors() -> bool:
    class Raising(keras.layers.Layer):
        def call(self, inputs: Any) -> Any:
            raise reraise_unchanged(_FieldError("inputs", "marked"))

    try:
        Raising()(keras.ops.zeros((1, 1)))
    except _FieldError:
        return True
    except Exception:  # any other exception means Keras wrapped ours
        return False
    return False


def _missing_distribution_symbols() -> list[str]:
    try:
        backend_lib, frontend, public = _distribution_modules()
    except ImportError:
        return ["keras.src.backend.distribution_lib", "keras.src.distribution.distribution_lib"]
    missing = [f"keras.src.distribution.distribution_lib.{name}" for name in ("set_distribution", "distribution")
               if not hasattr(frontend, name)]
    if not hasattr(public, "set_distribution"):
        missing.append("keras.distribution.set_distribution")
    if not hasattr(backend_lib, "list_devices"):
        missing.append("keras.src.backend.distribution_lib.list_devices")
    mesh = keras.distribution.DeviceMesh((1,), ("model",), ["cpu:0"])
    layouts = keras.distribution.LayoutMap(mesh)
    if layout_map_of(keras.distribution.ModelParallel(layout_map=layouts)) is not layouts:
        missing.append("keras.distribution.ModelParallel()._layout_map")
    layer = keras.layers.Dense(1)
    if not all(hasattr(layer, name) for name in ("_trainable_variables", "_non_trainable_variables")):
        missing.append("keras.layers.Layer()._trainable_variables/_non_trainable_variables")
    try:
        with keras.name_scope("outer"):
            if current_name_path() != "outer":
                missing.append("keras.src.backend.common.name_scope.current_path")
    except ImportError:
        missing.append("keras.src.backend.common.name_scope.current_path")
    return missing
