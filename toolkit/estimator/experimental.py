"""``tf.estimator.experimental``: early stopping, in-memory evaluation, supervised receivers, and more.

A lazy export table (like ``toolkit.estimator``'s): each name loads its module on first use.

Example:
    >>> from toolkit.estimator import experimental
    >>> callable(experimental.stop_if_no_decrease_hook)
    True
"""
from __future__ import annotations

from tf_config.lazy import lazy_exports

# public name -> module
_EXPORTS: dict[str, str] = {
    "make_early_stopping_hook": "toolkit.estimator.hooks.early_stopping",
    "stop_if_higher_hook": "toolkit.estimator.hooks.early_stopping",
    "stop_if_lower_hook": "toolkit.estimator.hooks.early_stopping",
    "stop_if_no_increase_hook": "toolkit.estimator.hooks.early_stopping",
    "stop_if_no_decrease_hook": "toolkit.estimator.hooks.early_stopping",
    "make_stop_at_checkpoint_step_hook": "toolkit.estimator.hooks.checkpoint_step",
    "InMemoryEvaluatorHook": "toolkit.estimator.hooks.in_memory_evaluator",
    "build_raw_supervised_input_receiver_fn": "toolkit.estimator.export",
    "call_logit_fn": "toolkit.estimator.canned.helpers",
    "dnn_logit_fn_builder": "toolkit.estimator.canned.helpers",      # TF1's tf.compat.v1.estimator.experimental
    "linear_logit_fn_builder": "toolkit.estimator.canned.helpers",   # TF1's tf.compat.v1.estimator.experimental
    "KMeans": "toolkit.estimator.canned.kmeans",
    "LinearSDCA": "toolkit.estimator.canned.sdca",
    "RNNClassifier": "toolkit.estimator.canned.rnn",
    "RNNEstimator": "toolkit.estimator.canned.rnn",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
