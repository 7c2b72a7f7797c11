"""tfdist's user-facing layer: training functions, the launcher, job submission.

The folder: ``training`` (the engine behind ``fit``), ``keras_dist`` and
``keras_distribution`` (Keras' own ``model.fit`` and ``keras.distribution``),
``estimator`` and ``compat`` (TF1 and Estimator code), ``data`` and ``layers``,
``launcher`` (a cluster from one call, one subpackage per engine), ``jobs``
(CMLE-style jobs: model, store, engines, tuning), ``ui`` and ``cli``.

Names are loaded lazily so that importing ``toolkit`` (for example by the CLI)
does not import TensorFlow until a TensorFlow-backed name is used.

Example:
    >>> from toolkit import launch            # doctest: +SKIP
    >>> result = launch(["python", "train.py"], workers=2, ps=1)  # doctest: +SKIP
"""
from __future__ import annotations

from tf_config.lazy import lazy_exports

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "launch": "toolkit.launcher",
    "LaunchResult": "toolkit.launcher",
    "History": "toolkit.training",
    "fit": "toolkit._entry",  # toolkit.training's, with toolkit.layers registered
    "CheckpointConfig": "toolkit.training",
    "FitOptions": "toolkit.training",
    "LogConfig": "toolkit.training",
    "SyncConfig": "toolkit.training",
    "ValidationConfig": "toolkit.training",
    "LaunchSpec": "toolkit.launcher",
    "enable_distributed_keras": "toolkit._entry",
    "disable_distributed_keras": "toolkit._entry",
    "enable_keras_distribution": "toolkit.keras_distribution",
    "disable_keras_distribution": "toolkit.keras_distribution",
    "ShardedEmbedding": "toolkit.layers",
    "make_sparse_optimizer": "toolkit.layers",
    "report_metric": "toolkit.hypertune",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
