"""Keras 3's ``keras.distribution`` on the TensorFlow backend, made real by tfdist.

After ``enable_keras_distribution()``, Keras' own API distributes:

* ``DataParallel`` runs on ``MirroredStrategy`` (one process, several
  devices) or ``MultiWorkerMirroredStrategy`` (several processes, from
  TF_CONFIG or ``keras.distribution.initialize``, trained by tfdist's engine
  as ``enable_distributed_keras()`` does);
* ``ModelParallel`` splits each variable its ``LayoutMap`` splits into shards
  on the mesh's devices, optimizer slots beside them;
* what TensorFlow cannot express is refused with a ``KerasDistributionError``.

Example:
    >>> import keras, toolkit                                   # doctest: +SKIP
    >>> toolkit.enable_keras_distribution()                     # doctest: +SKIP
    >>> mesh = keras.distribution.DeviceMesh((2,), ["model"], keras.distribution.list_devices())  # doctest: +SKIP
    >>> layouts = keras.distribution.LayoutMap(mesh)            # doctest: +SKIP
    >>> layouts["dense/kernel"] = (None, "model")               # doctest: +SKIP
    >>> keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layouts))  # doctest: +SKIP
    >>> print(toolkit.keras_distribution.placement_report(model))  # doctest: +SKIP
"""
from __future__ import annotations

from toolkit.keras_dist import enable_distributed_keras
from toolkit.keras_distribution import _install
from toolkit.keras_distribution._errors import KerasDistributionError
from toolkit.keras_distribution._report import placement_report, placement_rows
from toolkit.keras_distribution._sharded import ShardedWeight

__all__ = ["KerasDistributionError", "ShardedWeight", "disable_keras_distribution", "enable_keras_distribution",
           "keras_distribution_enabled", "placement_report", "placement_rows"]


def enable_keras_distribution() -> None:
    """Puts tfdist's TensorFlow ``distribution_lib`` behind ``keras.distribution``; idempotent.

    Call it once, before ``keras.distribution.set_distribution`` and before
    building models (a distribution already set is taken up). It also calls
    ``enable_distributed_keras()``, whose engine trains ``model.fit`` under
    MultiWorkerMirroredStrategy.
    """
    enable_distributed_keras()
    _install.enable()


def disable_keras_distribution() -> None:
    """Restores Keras' own ``distribution_lib`` and unsets the distribution (distributed Keras stays enabled)."""
    _install.disable()


def keras_distribution_enabled() -> bool:
    return _install.enabled()
