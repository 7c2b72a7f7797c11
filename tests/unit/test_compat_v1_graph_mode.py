"""``import toolkit.compat.v1 as tf`` switches to graph mode only where a TF1 program imports TensorFlow.

The switch itself is exercised end to end by the TF1 between-graph cluster test
(``tests/cluster/test_published_styles.py``); here, the rule that decides it.
"""
from __future__ import annotations

import sys

import toolkit.compat.v1 as tf1
from toolkit.compat.v1 import imported_by_main_script


def _frame_of(source: str, name: str):
    scope = {"__name__": name, "sys": sys}
    exec(compile(source, "<program>", "exec"), scope)
    return scope["frame"]


def test_the_top_level_of_the_main_script_switches_to_graph_mode():
    assert imported_by_main_script(_frame_of("frame = sys._getframe()", "__main__"))


def test_functions_libraries_and_tests_keep_eager_execution():
    inside = _frame_of("def f():\n    return sys._getframe()\nframe = f()", "__main__")
    assert not imported_by_main_script(inside)  # e.g. estimator.py's model_fn: the Estimator builds its own graph
    assert not imported_by_main_script(_frame_of("frame = sys._getframe()", "some_library"))
    assert not imported_by_main_script(None)
    assert tf1.executing_eagerly()  # this test module imported it at its top: pytest keeps eager


def test_tf1_names_are_there():
    for name in ("placeholder", "Session", "ConfigProto", "get_variable", "global_variables_initializer"):
        assert getattr(tf1, name) is getattr(tf1.compat.v1, name)
    assert tf1.app.flags.DEFINE_integer and tf1.flags.DEFINE_string and callable(tf1.app.run)
    for name in ("ClusterSpec", "Server", "Supervisor", "MonitoredTrainingSession", "replica_device_setter",
                 "SyncReplicasOptimizer", "AdamOptimizer", "StopAtStepHook"):
        assert hasattr(tf1.train, name), name


_MIXED = '''
import numpy as np
import keras
import toolkit.compat.v1 as tf

x = tf.placeholder(tf.float32, [None, 4])
model = keras.Sequential([keras.layers.Dense(3)])
loss = tf.reduce_mean(model(x))  # Keras 3 layers build into the graph and train with tf.train
train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    before = session.run(model.weights[0].value)
    session.run(train_op, {x: np.ones((2, 4), np.float32)})
    print("tf.train trained the Keras 3 layer:", bool((session.run(model.weights[0].value) != before).any()))
for what, call in (("fit", lambda: model.compile("sgd", "mse") or model.fit(np.zeros((4, 4)), np.zeros((4, 3)))),
                   ("apply_gradients", lambda: keras.optimizers.SGD().apply_gradients(
                       zip(tf.gradients(loss, model.trainable_variables), model.trainable_variables)))):
    try:
        call()
        print(what, "ran")
    except ValueError as exc:
        print(what, "refused:", type(exc).__name__, exc.field, exc)
'''


def test_keras3_training_in_a_graph_mode_program_is_refused_naming_the_task_and_the_fix(tmp_path):
    import json
    import os
    import subprocess

    script = tmp_path / "mixed.py"
    script.write_text(_MIXED)
    tf_config = {"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
                 "task": {"type": "worker", "index": 1}}
    env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tf.train trained the Keras 3 layer: True" in proc.stdout
    for what in ("Model.fit()", "Optimizer.apply_gradients()"):
        assert (f"refused: TrainingError model Keras 3's {what} needs eager execution, but task worker-1 runs TF1's "
                "graph mode on a cluster") in proc.stdout, proc.stdout
    assert proc.stdout.count("Fix: train the graph with a tf.train optimizer") == 2
