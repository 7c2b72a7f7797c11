"""``tf.keras`` of ``import toolkit.compat.v1 as tf``: Keras 2 (``tf_keras``'s v1 API) with a working ``estimator``.

Published TF 2.x code converts models with ``tf.keras.estimator.model_to_estimator(keras_model=...)``.
``tf_keras`` still has the name, but it raises ``NotImplementedError`` (tensorflow-estimator is gone), so
this namespace answers ``estimator.model_to_estimator`` with ``toolkit.estimator.keras_lib.model_to_estimator_v1``
(TF1's: a ``tf.compat.v1`` Estimator, ``checkpoint_format='saver'``) and everything else with
``tf_keras``' own v1 module, untouched.
"""
from __future__ import annotations

import types
from typing import Any

__all__ = ["keras"]


class _Keras(types.ModuleType):
    """A view of tf_keras' v1 ``keras`` module whose ``estimator`` is this project's."""

    def __init__(self, real: types.ModuleType, estimator: types.ModuleType) -> None:
        super().__init__(real.__name__, real.__doc__)
        self._real = real
        self.estimator = estimator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._real)) | {"estimator"})


def keras() -> types.ModuleType:
    from toolkit._compat.tf_keras import v1_keras
    from toolkit.estimator.keras_lib import model_to_estimator_v1

    estimator = types.ModuleType("toolkit.compat.v1.keras.estimator",
                                 "tf.keras.estimator: model_to_estimator for Keras 2 and Keras 3 models.")
    estimator.model_to_estimator = model_to_estimator_v1  # type: ignore[attr-defined]
    return _Keras(v1_keras(), estimator)
