"""The fences around TensorFlow's and Keras' private internals hold, and name what an upgrade removed."""
from __future__ import annotations

import re
from pathlib import Path

import keras
import pytest

from strategies import _compat as strategies_compat
from toolkit._compat import keras as keras_compat
from toolkit._compat import tensorflow as tf_compat

ROOT = Path(__file__).resolve().parents[2]
FENCES = {"strategies/_compat.py", "toolkit/_compat/keras.py", "toolkit/_compat/tensorflow.py",
          "toolkit/_compat/tf_keras.py"}
# What only a fence may write: private modules and the private attributes the fences wrap.
PRIVATE = re.compile(r"keras\.src|tensorflow\.python|tf_keras\.src|[.'\"](_flatten_layers|_fn|_fn_kwargs|"
                     r"_keras_call_info_injected|_parse_example_spec|_variable_shape|_sync_optimizer|_from_logits|"
                     r"_update_input|_layout_map|_trainable_variables|_non_trainable_variables|_get_control_flow_context|_cluster_coordinator|_preemption_handler_thread|"
                     r"_value|_momentums|_velocities|_learning_rate|_compile_config|_scale_loss_for_estimator_enabled|"
                     r"_is_loss_scaled_by_optimizer)\b")


def test_every_fenced_symbol_still_exists():
    assert strategies_compat.missing_symbols() == [], "strategies/_compat.py: TensorFlow/Keras removed these"
    assert keras_compat.missing_symbols() == [], "toolkit/_compat/keras.py: Keras removed these"
    assert tf_compat.missing_symbols() == [], "toolkit/_compat/tensorflow.py: TensorFlow removed these"


def test_a_removed_symbol_is_named(monkeypatch):
    monkeypatch.delattr(keras.layers.Layer, "_flatten_layers")
    original = keras.metrics.SparseCategoricalAccuracy.__init__

    def renamed(self, *args, **kwargs):  # as if Keras renamed the metric's private _fn
        original(self, *args, **kwargs)
        self.__dict__["_function"] = self.__dict__.pop("_fn")

    monkeypatch.setattr(keras.metrics.SparseCategoricalAccuracy, "__init__", renamed)
    assert strategies_compat.missing_symbols() == ["keras.layers.Layer._flatten_layers"]
    missing = keras_compat.missing_symbols()
    assert "keras.layers.Layer._flatten_layers" in missing
    assert "keras.metrics.SparseCategoricalAccuracy()._fn" in missing


def test_a_changed_behaviour_is_named(monkeypatch):
    monkeypatch.setattr(strategies_compat, "keras_variable_of", lambda initial_value: None)
    assert strategies_compat.missing_symbols() == [
        "keras.Variable's tf.Variable initial_value closing over the keras.Variable"]
    monkeypatch.setattr(keras_compat, "_CALL_INFO_INJECTED", "_not_what_keras_reads")
    assert "keras.layers.Layer.__call__ honouring _not_what_keras_reads" in keras_compat.missing_symbols()


def test_a_module_that_needs_a_removed_symbol_fails_at_import_naming_it(monkeypatch):
    monkeypatch.setattr(strategies_compat, "_find", lambda symbol: None)
    with pytest.raises(ImportError, match=r"tfdist needs tensorflow\.python\.trackable\.base:Trackable, which "
                                          r"TensorFlow .* does not have"):
        strategies_compat._load("tensorflow.python.trackable.base:Trackable")


class _Block(keras.layers.Layer):
    def __init__(self, name: str, *children: keras.layers.Layer) -> None:
        super().__init__(name=name)
        self.children = list(children)


def test_the_fenced_helpers_do_what_the_code_relies_on():
    inner = _Block("inner", keras.layers.Dense(2, name="inner_dense"))
    model = _Block("outer", inner, keras.layers.Dense(1, name="head"))
    assert [layer.name for layer in keras_compat.child_layers(model)] == ["inner", "inner_dense", "head"]
    assert [layer.name for layer in keras_compat.child_layers(model, recursive=False)] == ["inner", "head"]
    fn = keras_compat.mean_metric_fn(keras.metrics.SparseCategoricalAccuracy())
    assert [float(v) for v in fn([[1], [0]], [[0.1, 0.9], [0.2, 0.8]])] == [1.0, 0.0]


def test_between_graph_fences_bind_a_keras_variable_and_order_a_graphs_updates():
    import tensorflow as tf

    variable, other = keras.Variable(1.0), tf.Variable(5.0)
    keras_compat.bind_variable(variable, other)  # keras.Variable()._value
    variable.assign_add(1.0)
    assert float(other.numpy()) == 6.0
    keras_compat.count_atomically(variable)  # iterations.assign_add as one AssignAddVariableOp
    variable.assign_add(2.0)
    assert float(other.numpy()) == 8.0
    graph = tf.Graph()
    with graph.as_default():
        slot = tf.Variable(1.0)
        with tf_compat.automatic_control_dependencies() as ordered:  # auto_control_deps.AutomaticControlDependencies
            slot.assign(10.0)
            read = slot.read_value()  # without ordering it could run before the write
        written = tf.group(*ordered.ops_which_must_run)
        with tf.compat.v1.Session() as session:
            session.run(slot.initializer)
            assert session.run([read, written])[0] == 10.0


def test_no_private_internals_outside_the_fences():
    offenders = []
    for package in ("tf_config", "strategies", "toolkit", "models"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in FENCES:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PRIVATE.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == [], "private TensorFlow/Keras internals belong in a _compat module:\n" + "\n".join(offenders)


def test_the_distribution_lib_fence_replaces_keras_functions_and_puts_them_back():
    own_set, own_list = keras.distribution.set_distribution, keras.distribution.list_devices

    def replaced_set(value):
        keras_compat.original_set_distribution()(value)

    functions = {name: (lambda *a, _n=name, **k: _n) for name in keras_compat.DISTRIBUTION_LIB_FUNCTIONS}
    keras_compat.install_distribution_lib(functions, set_distribution=replaced_set,
                                          add_weight=keras_compat.original_add_weight(),
                                          optimizer_build=keras_compat.original_optimizer_build())
    try:
        assert keras.distribution.list_devices() == "list_devices"  # Keras' frontend calls the backend module's
        assert keras.distribution.set_distribution is replaced_set
        assert keras_compat.distribution_lib_installed()
    finally:
        keras_compat.uninstall_distribution_lib()
    assert keras.distribution.set_distribution is own_set and keras.distribution.list_devices is own_list
    assert keras.distribution.list_devices() != "list_devices"
    with keras.name_scope("outer"):
        assert keras_compat.current_name_path() == "outer"
