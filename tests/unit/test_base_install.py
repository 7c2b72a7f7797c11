"""``pip install tfdist`` without extras runs the seeds, estimator.py and mnist_replica.py.

Building a fresh virtual environment would take minutes; instead a child
interpreter refuses to import every installed module that no core dependency
provides (the extras: Ray, pytest, pandas, matplotlib, ...), and runs what
the seeds need there: estimator.py's TF1 ``model_fn`` (``tf.layers`` from
``tf_keras``, ``tf.losses``, ``tf.metrics``, a ``tf.train`` optimizer) built
into a graph, the Estimator and its parsing serving input, the digits data,
and mnist_replica.py's between-graph helpers.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _core_distributions() -> set[str]:
    """The core dependencies of pyproject.toml and everything they require (no extras), normalised names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(text) for text in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo.extend(Requirement(text) for text in metadata.requires(requirement.name) or ())
        except metadata.PackageNotFoundError:
            continue  # an optional platform package that is not installed here
    return seen


def _modules_outside(core: set[str]) -> list[str]:
    """Installed top-level modules that only distributions outside ``core`` provide."""
    provided = metadata.packages_distributions()
    own = {"tf_config", "strategies", "toolkit", "models"}
    return sorted(module for module, dists in provided.items()
                  if module not in own and not {re.sub(r"[-_.]+", "-", d).lower() for d in dists} & core)


_CHILD = textwrap.dedent('''
    import importlib.abc, json, sys
    blocked = set(json.loads(sys.argv[1]))

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ImportError(f"{name} is not part of the base install")
            return None

    sys.meta_path.insert(0, Refuse())
    sys.path.insert(0, sys.argv[2])
    import estimator, mnist_replica
    import toolkit.compat.v1 as tf
    from toolkit import data
    from strategies import between_graph

    digits = data.load("digits")
    columns = [tf.feature_column.numeric_column("pixels", shape=(64,))]
    with tf.Graph().as_default():
        features = {"pixels": tf.placeholder(tf.float32, [None, 64])}
        labels = tf.placeholder(tf.int64, [None])
        spec = estimator.model_fn(features, labels, tf.estimator.ModeKeys.TRAIN,
                                  {"feature_columns": columns, "hidden_units": 8, "num_classes": 10,
                                   "learning_rate": 0.01})
        assert spec.train_op is not None and len(tf.trainable_variables()) == 4
    tf.estimator.export.build_parsing_serving_input_receiver_fn(tf.feature_column.make_parse_example_spec(columns))
    assert tf.estimator.Estimator and between_graph.replica_setter and mnist_replica.shard_indices(10, 2, 1)
    legacy = sorted(m for m in sys.modules if m.partition(".")[0] == "tf_keras")[:1]
    print("base install ok", len(digits.features), legacy)
''')


def test_the_seeds_run_on_the_core_dependencies_alone():
    core = _core_distributions()
    assert {"tensorflow", "keras", "tf-keras", "scikit-learn"} <= core  # tf_keras serves TF1's tf.layers
    blocked = _modules_outside(core)
    assert "ray" in blocked and "pytest" in blocked  # the check does refuse the extras
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(blocked), str(ROOT)], capture_output=True,
                          text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "base install ok 1437 ['tf_keras']" in proc.stdout
