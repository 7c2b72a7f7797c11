"""A device map across processes: the head of a model lives on another task.

The local launcher starts two tasks on 127.0.0.1: worker 0 is the client (it
builds and trains the model), worker 1 only hosts devices. This file is also
the script both tasks run (``python test_device_map_remote.py <result.json>``),
so the test asserts on what a real two-process run wrote: variable and slot
devices, the op placement log, the loss, and both exit codes (worker 1 must
exit by itself, released by the client).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

_TIMEOUT = 240


def _client_main(out: Path) -> int:
    """What every task runs: worker 1 serves, worker 0 trains with a device map."""
    import keras
    import numpy as np
    import tensorflow as tf

    from strategies import ServeOptions
    from strategies.device_map import DeviceMap, in_graph_session, run_in_graph_role

    cfg = run_in_graph_role(options=ServeOptions.from_env(chief_start_timeout=120))  # worker 1 serves here, exits
    tf.debugging.set_log_device_placement(True)
    with in_graph_session(cfg, timeout=120) as hosts:
        remote = hosts[0]

        def model_fn():
            inputs = keras.Input((4,))
            hidden = keras.layers.Dense(16, activation="relu", name="body")(inputs)
            return keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden))

        device_map = DeviceMap({"head": remote})
        optimizer = keras.optimizers.Adam(0.02)
        model = device_map.build(model_fn, optimizer=optimizer)
        model.compile(optimizer=optimizer, loss="mse")
        x = np.random.default_rng(0).normal(size=(512, 4)).astype("float32")
        y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
        history = model.fit(x, y, epochs=4, batch_size=32, verbose=0)
        device_map.verify(model, optimizer=optimizer)
        result = {
            "hosts": hosts,
            "variables": {v.path: v.value.device for v in model.weights},
            "slots": {v.path: v.value.device for v in optimizer.variables},
            "loss": history.history["loss"],
            "explain": device_map.explain(model),
        }
    out.write_text(json.dumps(result))
    return 0


@pytest.mark.cluster
def test_head_layer_and_its_slots_live_on_task_1(tmp_path, no_orphans):
    from toolkit.launcher import launch

    out = tmp_path / "result.json"
    result = launch([sys.executable, __file__, str(out)], workers=2, ps=0, job_dir=tmp_path / "job",
                    timeout=_TIMEOUT, env={"TF_CPP_MIN_LOG_LEVEL": "0"}, echo=False,
                    preload=("tensorflow", "keras"))  # both tasks forked from one TensorFlow import
    client_log = result.task("worker-0").log_path.read_text(errors="replace")
    assert result.ok, result.message
    assert {t.name: (t.exit_code, t.stopped) for t in result.tasks} == {"worker-0": (0, False),
                                                                         "worker-1": (0, False)}

    result = json.loads(out.read_text())
    task1 = "/job:worker/replica:0/task:1/device:CPU:0"
    task0 = "/job:worker/replica:0/task:0/device:CPU:0"
    assert result["hosts"] == [task1]
    assert result["variables"] == {"body/kernel": task0, "body/bias": task0, "head/kernel": task1, "head/bias": task1}
    head_slots = {p: d for p, d in result["slots"].items() if "head_" in p}
    body_slots = {p: d for p, d in result["slots"].items() if "body_" in p}
    assert len(head_slots) == 4 and set(head_slots.values()) == {task1}  # Adam m and v of kernel and bias
    assert len(body_slots) == 4 and set(body_slots.values()) == {task0}
    assert result["loss"][-1] < 0.5 * result["loss"][0]
    # the head's forward and backward matmuls ran on task 1 (the placer logs every op of the traced step)
    head_matmuls = [line.rstrip() for line in client_log.splitlines() if "/head" in line and "(MatMul)" in line]
    assert any("gradient_tape" in line for line in head_matmuls), head_matmuls[:4]
    assert any("gradient_tape" not in line for line in head_matmuls), head_matmuls[:4]
    assert all(line.endswith(task1) for line in head_matmuls), head_matmuls
    assert "head" in result["explain"] and "task:1" in result["explain"]


if __name__ == "__main__":
    sys.exit(_client_main(Path(sys.argv[1])))
