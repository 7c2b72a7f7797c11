"""Estimator-style training on TF 2 and Keras 3: ``tf.estimator``'s workflow, on the toolkit's engine.

``tf.estimator`` is gone from TensorFlow 2.16+, yet its workflow (one script,
started in every task with its own TF_CONFIG) is what the toolkit is about. A
``model_fn`` written once runs unchanged locally and on a cluster; only the
TF_CONFIG changes.

Example:
    >>> from toolkit.estimator import Estimator, RunConfig, TrainSpec, EvalSpec, train_and_evaluate  # doctest: +SKIP
    >>> est = Estimator(model_fn, config=RunConfig(model_dir="runs/digits"))
    >>> metrics, exports = train_and_evaluate(est, TrainSpec(train_fn, max_steps=500), EvalSpec(eval_fn))
"""
from __future__ import annotations

import importlib
from typing import Any

# public name -> module; loaded lazily so RunConfig and the specs never import TensorFlow
_EXPORTS: dict[str, str] = {
    "EstimatorSpec": "toolkit.estimator.spec",
    "EvalSpec": "toolkit.estimator.spec",
    "ModeKeys": "toolkit.estimator.spec",
    "SpecError": "toolkit.estimator.spec",
    "TrainSpec": "toolkit.estimator.spec",
    "RunConfig": "toolkit.estimator.run_config",
    "RunConfigError": "toolkit.estimator.run_config",
    "Estimator": "toolkit.estimator.estimator",
    "EstimatorError": "toolkit.estimator.estimator",
    "train_and_evaluate": "toolkit.estimator.training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit.estimator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
