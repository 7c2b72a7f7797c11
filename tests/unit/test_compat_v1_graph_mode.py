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
