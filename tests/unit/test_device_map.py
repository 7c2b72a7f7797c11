"""Device maps: validation in process, placement on 3 logical CPUs in a subprocess.

Logical CPUs must be configured before TensorFlow initialises its devices,
which the pytest process may already have done, so the placement checks run
this file as a script in a fresh process (``python test_device_map.py out.json``)
with the op placement log on, and assert on the JSON and the log it leaves.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest
import tensorflow as tf

from strategies._placement_keras import LayerNode  # noqa: E402
from strategies.device_map import SYNTAXES, DeviceMap, DeviceMapError  # noqa: E402

_CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


# the placement scenario runs once per module: its tests stay on one pytest worker
pytestmark = pytest.mark.xdist_group("device_map")


def _model():
    inputs = keras.Input((4,))
    encoder = keras.Sequential([keras.layers.Dense(8, activation="relu", name="dense"),
                                keras.layers.Dense(8, name="dense_1")], name="encoder")
    hidden = keras.layers.Dense(8, name="decoder")(encoder(inputs))
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden), name="toy")


# ------------------------------------------------------------------ in process
def test_rules_are_validated_when_the_map_is_made():
    with pytest.raises(DeviceMapError, match="`rules` must map at least one layer pattern") as info:
        DeviceMap({})
    assert info.value.field == "rules"
    with pytest.raises(DeviceMapError, match=r"`syntax` is 'sql'; expected one of \['auto', 'glob', 'regex'\]"):
        DeviceMap({"a": "/cpu:0"}, syntax="sql")
    with pytest.raises(DeviceMapError, match=r"pattern '\(head' is not a valid regular expression") as info:
        DeviceMap({"(head": "/cpu:0"}, syntax="regex")
    assert info.value.field == "rules['(head']"
    with pytest.raises(DeviceMapError, match=r"`rules\['head'\]` is 'gpu zero', which is not a device string"):
        DeviceMap({"head": "gpu zero"})
    with pytest.raises(DeviceMapError, match=r"each rule must be a \(pattern, device\) pair of strings"):
        DeviceMap([("head", 3)])
    assert sorted(SYNTAXES) == ["auto", "glob", "regex"]


def test_maps_round_trip_through_json_and_reject_unknown_keys():
    dm = DeviceMap({"encoder/.*": "/device:CPU:1", "head": "/device:CPU:0"}, default="/cpu:0", place_gradients=False)
    again = DeviceMap.from_json(dm.to_json())
    assert again == dm and again.rules == (("encoder/.*", "/device:CPU:1"), ("head", "/device:CPU:0"))
    assert DeviceMap.from_dict({"rules": {"head": "/cpu:0"}}).rules == (("head", "/cpu:0"),)
    with pytest.raises(DeviceMapError, match=r"a device map is a mapping with keys \['rules', 'default'"):
        DeviceMap.from_dict({"rules": {"head": "/cpu:0"}, "devices": 2})
    with pytest.raises(DeviceMapError, match="the device map is not valid JSON"):
        DeviceMap.from_json("{rules")
    with pytest.raises(DeviceMapError, match="`place_gradients` is 'yes'; expected True or False"):
        DeviceMap({"a": "/cpu:0"}, place_gradients="yes")


def _node(path: str) -> LayerNode:
    parts = path.split("/")
    ancestors: tuple[LayerNode, ...] = ()
    for i, part in enumerate(parts[:-1]):
        ancestors += (LayerNode(None, part, "/".join(parts[: i + 1]), ancestors),)
    return LayerNode(None, parts[-1], path, ancestors)


def test_first_matching_rule_wins_and_children_inherit_their_parents_device():
    dm = DeviceMap({"encoder/.*": "/cpu:1", "*dense*": "/cpu:2", "enc?der": "/cpu:3"}, default="/cpu:0")
    assert dm.device_for(_node("encoder/dense")) == ("/cpu:1", "rule 'encoder/.*'")   # regex beats the glob
    assert dm.device_for(_node("top/dense_4")) == ("/cpu:2", "rule '*dense*'")        # glob
    assert dm.device_for(_node("encoder/conv")) == ("/cpu:1", "rule 'encoder/.*'")
    assert dm.device_for(_node("encoder")) == ("/cpu:3", "rule 'enc?der'")
    assert dm.device_for(_node("head")) == ("/cpu:0", "default")
    inherit = DeviceMap({"encoder": "/cpu:1"})
    assert inherit.device_for(_node("encoder/conv")) == ("/cpu:1", "parent via 'encoder'")
    assert inherit.device_for(_node("head")) == (None, "default")
    assert DeviceMap({"encoder/*": "/cpu:1"}, syntax="regex").matching_rules(("encoder/dense",)) == []


def test_problems_report_missing_devices_unused_patterns_and_conflicts():
    model = _model()
    dm = DeviceMap({"encoder/.*": "/cpu:0", "*dense_1": "/cpu:0", "decodr": "/cpu:0", "head": "/device:CPU:97"})
    problems = dm.problems(model)
    errors = [p for p in problems if p.is_error]
    assert [p.field for p in errors] == ["rules['head']"]
    assert "'/device:CPU:97', which is not a device of this process (available: " in errors[0].message
    assert _CPU.format(0) in errors[0].message
    warnings = {p.field: p.message for p in problems if not p.is_error}
    assert warnings["rules['encoder/.*']"].startswith(
        "layer 'encoder/dense_1' is matched by 'encoder/.*' and by '*dense_1'; the first wins: /cpu:0.")
    assert warnings["rules['decodr']"].startswith("pattern 'decodr' matches no layer of model 'toy' (layers: ")
    with pytest.raises(DeviceMapError, match=r"rules\['head'\]: `rules\['head'\]` is '/device:CPU:97'") as info:
        dm.check(model)
    assert info.value.field == "rules['head']" and len(info.value.problems) == 3


# ------------------------------------------------------- on 3 logical CPUs
def _scenarios(out: Path) -> None:
    """Runs in a fresh process; every result goes into ``out`` as JSON."""
    import numpy as np

    from strategies import configure_local_devices
    from strategies._placement import variable_device

    tf.debugging.set_log_device_placement(True)  # before TensorFlow initialises its devices
    configure_local_devices(3)
    keras.utils.set_random_seed(0)
    result: dict = {}
    x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")

    dm = DeviceMap({"encoder/.*": "/device:CPU:1", "head": "/device:CPU:2"}, default="/device:CPU:0")
    optimizer = keras.optimizers.Adam(0.02)
    model = dm.build(_model, optimizer=optimizer)
    model.compile(optimizer=optimizer, loss="mse")
    print("FIT STARTS", flush=True)
    result["fit_loss"] = model.fit(x, y, epochs=5, batch_size=32, verbose=0).history["loss"]
    dm.verify(model, optimizer=optimizer)
    result["variables"] = {v.path: variable_device(v) for v in model.weights}
    result["slots"] = {v.path: variable_device(v) for v in optimizer.variables}
    result["explain"] = dm.explain(model)

    loop_model = dm.build(_model)
    loop_optimizer = dm.place_optimizer(keras.optimizers.Adam(0.02))

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((loop_model(xb) - yb) ** 2)
        loop_optimizer.apply_gradients(zip(tape.gradient(loss, loop_model.trainable_variables),
                                           loop_model.trainable_variables, strict=False))
        return loss

    full_loss = lambda: float(tf.reduce_mean((loop_model(x) - y) ** 2))  # noqa: E731
    before = full_loss()
    for _ in range(5):
        for i in range(0, 256, 32):
            step(x[i:i + 32], y[i:i + 32])
    result["loop_loss"] = [before, full_loss()]

    from toolkit.training import FitOptions, fit

    def compiled_model():
        model = _model()
        model.compile(optimizer=DeviceMap.place_optimizer(keras.optimizers.Adam(0.02)),
                      loss=keras.losses.MeanSquaredError())
        return model

    def dataset_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

    trained = fit(dm.builder(compiled_model), dataset_fn, epochs=4, steps_per_epoch=8, strategy="default",
                  model_dir=str(out.parent / "fit"), verbose=0, options=FitOptions(export=False))
    fit_optimizer = trained.model.optimizer  # the one fit trained with (build_state sets it)
    dm.verify(trained.model, optimizer=fit_optimizer)
    result["toolkit_fit"] = {"loss": trained.history["loss"],
                             "head": [variable_device(v) for v in trained.model.get_layer("head").weights],
                             "head_slots": [variable_device(v) for v in fit_optimizer.variables
                                            if v.path.split("/")[-1].startswith("head_")]}

    import toolkit.compat.v1 as tf1
    from toolkit.estimator import Estimator, EstimatorSpec, ModeKeys, RunConfig

    placed: dict = {}

    class _Placement(tf1.train.SessionRunHook):  # where TF really put each variable (its partition graphs)
        def before_run(self, run_context):
            return tf1.train.SessionRunArgs(None, options=tf1.RunOptions(output_partition_graphs=True))

        def after_run(self, run_context, run_values):
            for graph in run_values.run_metadata.partition_graphs:
                placed.update({node.name: node.device for node in graph.node if node.op == "VarHandleOp"})

    def model_fn(features, labels, mode):  # TF1 model parallelism: tf.device around each part of the graph
        with tf1.device("/device:CPU:1"):
            hidden = tf1.layers.dense(features, 8, activation=tf1.nn.relu, name="tf1_encoder")
        with tf1.device("/device:CPU:2"):
            predictions = tf1.layers.dense(hidden, 1, name="tf1_head")
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=predictions)
        loss = tf1.losses.mean_squared_error(labels, predictions)
        train_op = tf1.train.AdamOptimizer(0.02).minimize(loss, global_step=tf1.train.get_global_step())
        return EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[_Placement()])

    session_config = tf1.ConfigProto(device_count={"CPU": 3})  # a TF1 session's own view of the logical CPUs
    estimator = Estimator(model_fn, config=RunConfig(model_dir=str(out.parent / "estimator"), tf_config={},
                                                     session_config=session_config))
    estimator.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), max_steps=300)
    metrics = estimator.evaluate(lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(64))
    result["estimator"] = {"loss": float(metrics["loss"]), "label_variance": float(np.var(y)),
                           "head": sorted({placed.get("tf1_head/kernel"), placed.get("tf1_head/bias")}),
                           "encoder": placed.get("tf1_encoder/kernel")}

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__(name="sub")
            self.first, self.second = keras.layers.Dense(4, name="first"), keras.layers.Dense(1, name="second")

        def call(self, inputs):
            return self.second(self.first(inputs))

    sub = DeviceMap({"second": "/device:CPU:2"}).build(Subclassed, sample_input=x[:2])
    result["subclassed"] = {v.path: variable_device(v) for v in sub.weights}
    result["errors"] = {}
    for name, attempt in {
        "built_outside": lambda: DeviceMap({"head": "/device:CPU:2"}).apply(_model()),
        "lazy": lambda: DeviceMap({"b": "/device:CPU:2"}).build(
            lambda: keras.Sequential([keras.layers.Dense(2, name="a"), keras.layers.Dense(1, name="b")])),
        "missing": lambda: DeviceMap({"head": "/device:CPU:3"}).build(_model),
    }.items():
        try:
            attempt()
        except DeviceMapError as exc:
            result["errors"][name] = str(exc)
    out.write_text(json.dumps(result))


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """(result JSON, op placement log lines during fit) of one scenario run."""
    out = tmp_path_factory.mktemp("device_map") / "result.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    run = subprocess.run([sys.executable, __file__, str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, timeout=240, check=False)
    assert run.returncode == 0, run.stdout[-4000:]
    log = run.stdout.split("FIT STARTS", 1)[1].splitlines()
    return json.loads(out.read_text()), [line.rstrip() for line in log if "(MatMul)" in line]


def test_variables_and_optimizer_slots_follow_the_map(placed, no_orphans):
    result, _ = placed
    assert result["variables"] == {
        "encoder/dense/kernel": _CPU.format(1), "encoder/dense/bias": _CPU.format(1),
        "encoder/dense_1/kernel": _CPU.format(1), "encoder/dense_1/bias": _CPU.format(1),
        "decoder/kernel": _CPU.format(0), "decoder/bias": _CPU.format(0),
        "head/kernel": _CPU.format(2), "head/bias": _CPU.format(2),
    }
    for slot, device in result["slots"].items():
        owner = next((p for p in result["variables"] if slot.startswith("adam/" + p.replace("/", "_") + "_")), None)
        if owner is not None:
            assert device == result["variables"][owner], slot
    assert sum(1 for s in result["slots"] if s.startswith("adam/head_")) == 4
    assert result["subclassed"] == {"sub/first/kernel": _CPU.format(0), "sub/first/bias": _CPU.format(0),
                                    "sub/second/kernel": _CPU.format(2), "sub/second/bias": _CPU.format(2)}


def test_forward_and_backward_ops_run_on_each_layers_device(placed, no_orphans):
    _, matmuls = placed
    for stage, device in (("/encoder", _CPU.format(1)), ("/head", _CPU.format(2)), ("/decoder", _CPU.format(0))):
        lines = [line for line in matmuls if stage in line]
        assert any("gradient_tape" in line for line in lines) and any("gradient_tape" not in line for line in lines)
        assert all(line.endswith(device) for line in lines), (stage, lines)


def test_mapped_models_train_with_fit_and_a_custom_loop(placed, no_orphans):
    result, _ = placed
    assert result["fit_loss"][-1] < 0.3 * result["fit_loss"][0]
    before, after = result["loop_loss"]
    assert after < 0.3 * before


def test_mapped_models_train_with_toolkit_fit(placed, no_orphans):
    trained = placed[0]["toolkit_fit"]
    assert trained["loss"][-1] < 0.3 * trained["loss"][0]
    assert trained["head"] == [_CPU.format(2)] * 2 and trained["head_slots"] == [_CPU.format(2)] * 4


def test_mapped_models_train_with_the_estimator_api(placed, no_orphans):
    trained = placed[0]["estimator"]  # a TF1 model_fn placing its layers with tf.device, in graph mode
    assert trained["head"] == [_CPU.format(2)] and trained["encoder"] == _CPU.format(1)
    assert trained["loss"] < 0.1 * trained["label_variance"]


def test_explain_shows_each_layer_and_the_balance_per_device(placed, no_orphans):
    text = placed[0]["explain"]
    assert text.splitlines()[0].split() == ["layer", "device", "params", "bytes", "placed", "by"]
    assert "encoder/dense    /device:CPU:1      40  160 B  rule 'encoder/.*'" in text
    assert "head             /device:CPU:2       9   36 B  rule 'head'" in text
    assert "decoder          /device:CPU:0      72  288 B  default" in text
    assert "/device:CPU:1       2     112  448 B    58%" in text


def test_placement_that_cannot_be_honoured_fails_loudly(placed, no_orphans):
    errors = placed[0]["errors"]
    assert "variable 'head/kernel' is on " + _CPU.format(0) in errors["built_outside"]
    assert "Build the model with DeviceMap.build(model_fn, ...)" in errors["built_outside"]
    assert "layer 'b' is not built" in errors["lazy"] and "Pass sample_input= or input_shape=" in errors["lazy"]
    assert "'/device:CPU:3', which is not a device of this process (available: " in errors["missing"]
    assert _CPU.format(2) in errors["missing"]


if __name__ == "__main__":
    _scenarios(Path(sys.argv[1]))
