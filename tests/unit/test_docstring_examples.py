"""The examples in the docstrings of strategies, toolkit and models are documentation: they run, or say where they do.

Every module with a ``>>>`` example is in exactly one list:

* ``RUN``: its examples run here, in one process with no cluster, and must pass.
* ``SHOWN``: its examples need a cluster, a job on disk or a fresh process
  (logical devices), so every one of them is ``+SKIP``; the same calls run in
  the test named next to it.

(``tf_config``'s examples run in ``test_tf_config_doctests.py``.)
"""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_TESTS = _REPO / "tests"

RUN = [
    "models", "models.classifiers", "models.ctr", "models.recommender", "toolkit.cli._flags",
    "toolkit.launcher._dialect",
    "toolkit.launcher._policy", "toolkit.training.options",
    "toolkit.compat.v1", "toolkit.data", "toolkit.data.ctr", "toolkit.data.pipeline", "toolkit.data.sources",
    "toolkit.estimator.run_config", "toolkit.hypertune", "toolkit.jobs.backends", "toolkit.jobs.model.names",
    "toolkit.jobs.engines.slurm.backend", "toolkit.jobs.engines.kubernetes.trainjob", "toolkit.jobs.model.spec",
    "toolkit.jobs.engines.kubernetes.tfjob", "toolkit.jobs.model.tiers", "toolkit.layers", "toolkit.layers.embedding",
    "toolkit.training", "toolkit.training.fit", "toolkit.training.state",
    "toolkit.estimator.experimental", "toolkit.estimator.inputs", "toolkit.estimator.inputs.numpy_io",
    "toolkit.estimator.canned.helpers", "toolkit.jobs.reader", "toolkit._moved",
]

SHOWN = {
    "toolkit.ui": "unit/test_ui_browser.py",  # a server, and a browser to look at it
    "strategies": "cluster/test_sharding_ps.py",  # run_role + make_strategy + chief_session in pss_train.py
    "strategies._roles": "cluster/test_roles_cluster.py",
    "toolkit.layers.recommender": "cluster/test_sharding_ps.py",  # the sharded recommender across two ps
    "strategies._shutdown": "cluster/test_sharding_ps.py",
    "strategies._factory": "unit/test_strategies_factory.py",  # logical CPUs: only before TF initialises
    "strategies._devices": "unit/test_training_local_strategies.py",
    "strategies.device_map": "unit/test_device_map.py",
    "strategies.sharding": "cluster/test_sharding_ps.py",
    "strategies.sync_replicas": "unit/test_sync_replicas.py",
    "toolkit": "cluster/test_launch_cluster.py",
    "toolkit.launcher": "cluster/test_launch_cluster.py",
    "toolkit.launcher.ray": "cluster/test_ray_backend.py",
    "toolkit.launcher.slurm": "cluster/test_slurm_cluster.py",
    "toolkit.jobs": "cluster/test_jobs_cluster.py",
    "toolkit.jobs.api": "cluster/test_jobs_cluster.py",
    "toolkit.jobs.tuning": "cluster/test_tuning_digits.py",
    "toolkit.keras_dist": "cluster/test_keras_fit_cluster.py",
    "toolkit.keras_distribution": "unit/test_keras_distribution.py",
    "toolkit.layers.sparse_optimizers": "unit/test_sharding.py",
    "toolkit.layers.train_step": "cluster/test_sharding_ps.py",
    "toolkit.training.evaluation": "unit/test_training_fit.py",
    "toolkit.estimator": "unit/test_estimator_graph.py",
    "toolkit.estimator.estimator": "unit/test_estimator_graph.py",
    "toolkit.estimator.canned": "unit/test_canned_estimators.py",
    "toolkit.estimator.canned.dnn": "unit/test_canned_estimators.py",
    "toolkit.estimator.canned.linear": "unit/test_canned_estimators.py",
    "toolkit.estimator.canned.dnn_linear_combined": "cluster/test_canned_cluster.py",
    "toolkit.estimator.canned.v1": "unit/test_canned_estimators.py",
    "toolkit.estimator.canned.baseline": "unit/test_canned_head_based.py",
    "toolkit.estimator.canned.head_based": "unit/test_canned_head_based.py",
    "toolkit.estimator.canned.kmeans": "unit/test_canned_kmeans.py",
    "toolkit.estimator.canned.rnn": "unit/test_canned_rnn.py",
    "toolkit.estimator.head.base": "unit/test_heads_public.py",
    "toolkit.estimator.inputs.pandas_io": "unit/test_estimator_inputs.py",
    "toolkit.estimator.extenders": "unit/test_estimator_core.py",
    "toolkit.estimator.hooks.early_stopping": "unit/test_estimator_hooks.py",
    "toolkit.estimator.tpu": "unit/test_estimator_tpu.py",
    "toolkit.estimator.canned.boosted_trees": "unit/test_estimator_boosted_trees.py",
    "toolkit.estimator.hooks.session_run": "unit/test_estimator_api_extras.py",
    "toolkit.estimator.keras_lib": "unit/test_model_to_estimator.py",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(_REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_module_with_examples_is_listed_once():
    found = {_module_name(path) for package in ("strategies", "toolkit", "models")
             for path in (_REPO / package).rglob("*.py") if ">>>" in path.read_text(encoding="utf-8")}
    assert not set(RUN) & set(SHOWN)
    assert found == set(RUN) | set(SHOWN), {"unlisted": sorted(found - set(RUN) - set(SHOWN)),
                                            "gone": sorted(set(RUN) | set(SHOWN) - found)}


@pytest.mark.parametrize("name", RUN)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", sorted(SHOWN))
def test_shown_examples_are_skipped_whole_and_tested_elsewhere(name):
    examples = [example for test in doctest.DocTestFinder().find(importlib.import_module(name))
                for example in test.examples]
    assert examples
    ran = [example.source for example in examples if not example.options.get(doctest.SKIP)]
    assert not ran, f"{name}: examples without +SKIP would run half an example: {ran}"
    assert (_TESTS / SHOWN[name]).exists()
