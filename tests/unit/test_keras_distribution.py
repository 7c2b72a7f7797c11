"""keras.distribution on TensorFlow: DataParallel, ModelParallel, a 2-D mesh and refusals, on 4 logical CPUs.

Everything runs in one subprocess (logical CPUs must be set before TensorFlow
starts); DataParallel and the 1-D ModelParallel use the first 2 devices.

The scenarios follow Keras' "Distributed training with Keras 3" guide (a
mesh from ``list_devices()``, ``DataParallel(devices=...)``, a ``LayoutMap``
splitting Dense kernels over a ``model`` axis) and what the JAX backend's
``distribution_lib`` guarantees (variables really laid out on the mesh).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STEPS, BATCH = 6, 16


def _data():
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 8)).astype("float32")
    return x, (x @ rng.normal(size=(8, 4))).astype("float32")


def _model(keras, units: int = 16):
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(units, activation="relu", name="d1")(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, name="d2")(hidden))


def _fit(keras, model, x, y, optimizer):
    model.compile(optimizer=optimizer, loss="mse")
    return model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0).history["loss"]


def _data_parallel(result, keras, x, y):
    reference = _model(keras)
    start = reference.get_weights()
    _fit(keras, reference, x, y, keras.optimizers.SGD(0.1))
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()[:2]))
    model = _model(keras)
    model.set_weights(start)
    _fit(keras, model, x, y, keras.optimizers.SGD(0.1))
    result["dp_strategy"] = type(model.distribute_strategy).__name__
    result["dp_replicas"] = model.distribute_strategy.num_replicas_in_sync
    result["dp_max_diff"] = max(float(abs(a - b).max()) for a, b in zip(model.get_weights(),
                                                                          reference.get_weights(), strict=True))
    result["dp_evaluate_diff"] = abs(model.evaluate(x, y, batch_size=BATCH, verbose=0)
                                     - reference.evaluate(x, y, batch_size=BATCH, verbose=0))
    result["dp_predict_diff"] = float(abs(model.predict(x, batch_size=BATCH, verbose=0)
                                          - reference.predict(x, batch_size=BATCH, verbose=0)).max())
    import tensorflow as tf

    seen = []

    class Custom(keras.Model):  # Keras' guide style: a train_step of one's own
        def train_step(self, data):
            seen.append(tf.distribute.get_replica_context().num_replicas_in_sync)
            return super().train_step(data)

    inputs = keras.Input((8,))
    custom = Custom(inputs, keras.layers.Dense(4)(inputs))
    result["dp_custom_loss"] = _fit(keras, custom, x, y, keras.optimizers.SGD(0.1))
    result["dp_custom_replicas"] = sorted(set(seen))
    keras.distribution.set_distribution(None)


def _layouts(keras, shape=(1, 2)):
    devices = keras.distribution.list_devices()[:shape[0] * shape[1]]
    mesh = keras.distribution.DeviceMesh(shape, ["batch", "model"], devices)
    layouts = keras.distribution.LayoutMap(mesh)
    layouts["d1/kernel"] = (None, "model")
    layouts["d1/bias"] = ("model",)
    layouts["d2/kernel"] = ("model", None)
    return layouts


def _matmul_devices(model):
    """How many matmuls of one training step (forward and gradients) each device runs, from the traced graph."""
    import tensorflow as tf

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function(tf.zeros((BATCH, 8)), tf.zeros((BATCH, 4))).graph
    counts: dict = {}
    for op in graph.get_operations():
        if op.type == "MatMul":
            counts[op.device] = counts.get(op.device, 0) + 1
    return counts


def _model_parallel(result, keras, x, y, tmp):
    from toolkit.keras_distribution import placement_report, placement_rows

    reference = _model(keras)
    start = reference.get_weights()
    result["mp_reference_loss"] = _fit(keras, reference, x, y, keras.optimizers.Adam(0.01))
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=_layouts(keras)))
    model = _model(keras)
    for layer, (kernel, bias) in zip(model.layers[1:], (start[:2], start[2:]), strict=True):
        layer.kernel.assign(kernel)  # a split kernel takes a whole value and splits it
        layer.bias.assign(bias)
    result["mp_loss"] = _fit(keras, model, x, y, keras.optimizers.Adam(0.01))
    result["mp_matmuls"] = _matmul_devices(model)
    result["mp_rows"] = placement_rows(model)
    result["mp_report"] = placement_report(model)
    result["mp_max_diff"] = max(float(abs(a - b).max()) for a, b in zip(
        [model.get_layer("d1").kernel.numpy(), model.get_layer("d2").kernel.numpy()],
        [reference.get_layer("d1").kernel.numpy(), reference.get_layer("d2").kernel.numpy()], strict=True))
    path = str(tmp / "sharded.weights.h5")
    model.save_weights(path)
    keras.distribution.set_distribution(None)
    whole = _model(keras)
    whole.load_weights(path)  # the logical tensors, into an unsplit model
    result["ckpt_whole_diff"] = float(abs(whole.predict(x, verbose=0) - model.predict(x, verbose=0)).max())
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=_layouts(keras)))
    again = _model(keras)
    again.load_weights(path)
    result["ckpt_sharded_diff"] = float(abs(again.predict(x, verbose=0) - model.predict(x, verbose=0)).max())
    result["ckpt_sharded_devices"] = [str(v.value.device)[-5:] for v in again.get_layer("d1").weights]
    keras.distribution.set_distribution(None)


def _two_d(result, keras, x, y):
    """A (batch 2 x model 2) mesh: 2 Mirrored replicas, each holding its copy of every shard on its own device."""
    reference = _model(keras)
    start = reference.get_weights()
    _fit(keras, reference, x, y, keras.optimizers.Adam(0.01))
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=_layouts(keras, (2, 2))))
    model = _model(keras)
    for layer, (kernel, bias) in zip(model.layers[1:], (start[:2], start[2:]), strict=True):
        layer.kernel.assign(kernel)
        layer.bias.assign(bias)
    _fit(keras, model, x, y, keras.optimizers.Adam(0.01))
    result["2d_replicas"] = model.distribute_strategy.num_replicas_in_sync
    result["2d_rows"] = placement_rows_of(model)
    result["2d_max_diff"] = max(float(abs(a - b).max()) for a, b in zip(
        [model.get_layer("d1").kernel.numpy(), model.get_layer("d2").kernel.numpy()],
        [reference.get_layer("d1").kernel.numpy(), reference.get_layer("d2").kernel.numpy()], strict=True))
    keras.distribution.set_distribution(None)


def placement_rows_of(model):
    from toolkit.keras_distribution import placement_rows

    return placement_rows(model)


def _errors(result, keras, x, y):
    from toolkit.keras_distribution import KerasDistributionError

    d = keras.distribution

    def mesh_too_large():
        d.set_distribution(d.DataParallel(device_mesh=d.DeviceMesh((8,), ["batch"], [f"cpu:{i}" for i in range(8)])))

    def unknown_axis():
        other = d.DeviceMesh((2,), ["data"], d.list_devices()[:2])
        layouts = d.LayoutMap(d.DeviceMesh((1, 2), ["batch", "model"], d.list_devices()[:2]))
        layouts["d1/kernel"] = d.TensorLayout([None, "data"], other)
        d.set_distribution(d.ModelParallel(layout_map=layouts))

    def not_dividing():
        d.set_distribution(d.ModelParallel(layout_map=_layouts(keras)))
        _model(keras, units=15)

    def optimizer():
        d.set_distribution(d.ModelParallel(layout_map=_layouts(keras)))
        _fit(keras, _model(keras), x, y, keras.optimizers.Lamb(0.01))

    def two_d():
        mesh = d.DeviceMesh((2, 1), ["batch", "model"], d.list_devices()[:2])
        layouts = d.LayoutMap(mesh)
        layouts["d1/kernel"] = (None, "batch")  # a variable split inside the replicated batch axis
        d.set_distribution(d.ModelParallel(layout_map=layouts, batch_dim_name="batch"))

    def unmatched_layout():
        layouts = d.LayoutMap(d.DeviceMesh((1, 2), ["batch", "model"], d.list_devices()[:2]))
        layouts["dense/kernel"] = (None, "model")  # the model's paths are d1/kernel...: matches nothing
        d.set_distribution(d.ModelParallel(layout_map=layouts))
        _fit(keras, _model(keras), x, y, "adam")

    for name, attempt in {"mesh_too_large": mesh_too_large, "unmatched_layout": unmatched_layout,
                          "unknown_axis": unknown_axis, "not_dividing": not_dividing, "optimizer": optimizer,
                          "two_d": two_d}.items():
        try:
            attempt()
            result["errors"][name] = None
        except KerasDistributionError as exc:
            result["errors"][name] = f"{exc.field}: {exc}"
        finally:
            d.set_distribution(None)


def _scenarios(out: Path) -> None:
    from strategies import configure_local_devices

    configure_local_devices(4)
    import keras

    import toolkit

    toolkit.enable_keras_distribution()
    keras.utils.set_random_seed(1)
    x, y = _data()
    result: dict = {"devices": keras.distribution.list_devices(), "errors": {}}
    _data_parallel(result, keras, x, y)
    _model_parallel(result, keras, x, y, out.parent)
    _two_d(result, keras, x, y)
    _errors(result, keras, x, y)
    out.write_text(json.dumps(result, default=str))


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_distribution") / "result.json"
    run = subprocess.run([sys.executable, __file__, str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=dict(os.environ), timeout=240, check=False)
    assert run.returncode == 0, run.stdout[-4000:]
    return json.loads(out.read_text())


def test_data_parallel_fit_makes_one_devices_updates_on_the_global_batch(ran):
    assert ran["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert (ran["dp_strategy"], ran["dp_replicas"]) == ("MirroredStrategy", 2)
    assert ran["dp_max_diff"] < 1e-5
    assert ran["dp_evaluate_diff"] < 1e-5 and ran["dp_predict_diff"] < 1e-5


def test_a_custom_train_step_runs_unchanged_in_every_replica(ran):
    assert ran["dp_custom_replicas"] == [2]
    assert ran["dp_custom_loss"][0] > 0


def test_model_parallel_splits_kernels_with_slots_beside_each_shard(ran):
    rows = {(r["variable"], r["shard"]): r for r in ran["mp_rows"]}
    assert rows[("d1/kernel", "0/2")]["shape"] == [8, 8] and rows[("d1/kernel", "1/2")]["shape"] == [8, 8]
    assert rows[("d2/kernel", "0/2")]["shape"] == [8, 4] and rows[("d2/kernel", "1/2")]["shape"] == [8, 4]
    for name in ("d1/kernel", "d1/bias", "d2/kernel"):
        for shard, device in (("0/2", "CPU:0"), ("1/2", "CPU:1")):
            assert rows[(name, shard)]["devices"] == [device]
            assert rows[(name, shard)]["slots"] == [device]  # Adam's m and v beside the shard
    assert rows[("d2/bias", "-")]["layout"] == "whole" and rows[("d2/bias", "-")]["shape"] == [4]
    assert "d1/kernel  (None, 'model')  1/2    CPU:1" in ran["mp_report"]


def test_model_parallel_computes_forward_and_backward_where_the_shards_live(ran):
    # each of d1 and d2 has one shard per device: 1 forward, 1 input-gradient and 1 kernel-gradient matmul each
    assert ran["mp_matmuls"] == {"/device:CPU:0": 6, "/device:CPU:1": 6}


def test_model_parallel_trains_as_one_device_does(ran):
    assert ran["mp_loss"] == pytest.approx(ran["mp_reference_loss"], rel=1e-4)
    assert ran["mp_max_diff"] < 1e-4


def test_a_two_d_mesh_mirrors_each_shard_over_the_batch_axis_and_trains_as_one_device(ran):
    assert ran["2d_replicas"] == 2
    rows = {(r["variable"], r["shard"]): r for r in ran["2d_rows"]}
    for name in ("d1/kernel", "d2/kernel"):  # mesh [[cpu:0, cpu:1], [cpu:2, cpu:3]]: replica i, shard k on [i, k]
        assert rows[(name, "0/2")]["devices"] == rows[(name, "0/2")]["slots"] == ["CPU:0", "CPU:2"]
        assert rows[(name, "1/2")]["devices"] == rows[(name, "1/2")]["slots"] == ["CPU:1", "CPU:3"]
    assert rows[("d1/kernel", "1/2")]["shape"] == [8, 8]
    assert rows[("d2/bias", "-")]["devices"] == ["CPU:0", "CPU:2"]  # whole, mirrored over the batch axis
    assert ran["2d_max_diff"] < 1e-4


def test_a_sharded_checkpoint_holds_the_logical_tensors(ran):
    assert ran["ckpt_whole_diff"] < 1e-5
    assert ran["ckpt_sharded_diff"] < 1e-5
    assert ran["ckpt_sharded_devices"] == ["CPU:0", "CPU:1", "CPU:0", "CPU:1"]


@pytest.mark.parametrize(("case", "expected"), [
    ("mesh_too_large", "device_mesh: The DeviceMesh of shape (8,) needs 8 devices but this job has 4: cpu:0, cpu:1"),
    ("unknown_axis", "layout_map['d1/kernel']: The layout 'd1/kernel' shards over mesh axis 'data', which the mesh"),
    ("not_dividing", "splits dimension 1 of variable 'd1/kernel' (shape (8, 15)) over mesh axis 'model' of 2 "
                     "devices, but 15 does not divide by 2"),
    ("optimizer", "Optimizer Lamb cannot update variable 'd1/kernel', which the layout 'd1/kernel'"),
    ("unmatched_layout", "layout_map['dense/kernel']: The layout 'dense/kernel' splits variables, but it matches none "
                         "of the variables being trained: d1/kernel, d1/bias, d2/kernel, d2/bias"),
    ("two_d", "splits variables over the batch axis 'batch' (2 replicas). TensorFlow's mirrored strategies"),
])
def test_bad_input_is_refused_naming_it(ran, case, expected):
    assert ran["errors"][case] is not None and expected in ran["errors"][case], ran["errors"][case]


def test_initialize_refuses_a_cluster_that_disagrees_with_tf_config(monkeypatch):
    from toolkit.keras_distribution import KerasDistributionError
    from toolkit.keras_distribution._cluster import initialize, num_processes, process_id, reset

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                                "task": {"type": "worker", "index": 1}}))
    with pytest.raises(KerasDistributionError, match=r"`job_addresses` is '127.0.0.1:1,127.0.0.1:9' but TF_CONFIG"):
        initialize("127.0.0.1:1,127.0.0.1:9", 2, 1)
    with pytest.raises(KerasDistributionError, match=r"`process_id` is 0 but TF_CONFIG says this task is worker:1"):
        initialize("127.0.0.1:1,127.0.0.1:2", 2, 0)
    with pytest.raises(KerasDistributionError, match="`num_processes` is 3 but TF_CONFIG's cluster has 2"):
        initialize(None, 3, None)
    try:
        initialize("127.0.0.1:1,127.0.0.1:2", 2, 1)
        assert (num_processes(), process_id()) == (2, 1)
    finally:
        reset()



def test_initialize_without_tf_config_takes_keras_arguments(monkeypatch):
    from toolkit.keras_distribution import KerasDistributionError
    from toolkit.keras_distribution._cluster import cluster, initialize, num_processes, process_id, reset

    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(KerasDistributionError, match=r"`process_id` is 2; expected 0..1"):
        initialize("127.0.0.1:1,127.0.0.1:2", 2, 2)
    with pytest.raises(KerasDistributionError, match="no TF_CONFIG, so the processes cannot find each other"):
        initialize(None, None, None)
    try:
        initialize("127.0.0.1:1, 127.0.0.1:2", 2, 1)
        assert (num_processes(), process_id()) == (2, 1)
        assert dict(cluster().cluster) == {"worker": ("127.0.0.1:1", "127.0.0.1:2")}
    finally:
        reset()
    assert (num_processes(), process_id()) == (1, 0)


if __name__ == "__main__":
    _scenarios(Path(sys.argv[1]))
