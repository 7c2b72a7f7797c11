"""The one place that reaches into ``tf_keras`` for TF1's layers (a core dependency of tfdist).

``tf.compat.v1.layers`` is gone with Keras 3; ``tf_keras`` 2.21 still ships
the legacy v1 layers (``dense``, ``conv2d``, ``max_pooling2d``, ``dropout``,
``batch_normalization``, ``flatten`` ...) under its v1 API namespace.
``tests/unit/test_estimator_graph.py`` names these symbols, so an upgrade that
moves them fails there first. Nothing on the Keras 3 paths imports this module.
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["LEGACY_LAYERS_MODULE", "V1_KERAS_MODULE", "compile_arguments", "legacy_layers", "restore_eager_model_class",
           "trusted_deserialization", "v1_keras"]

LEGACY_LAYERS_MODULE = "tf_keras.api._v1.keras.__internal__.legacy.layers"
V1_KERAS_MODULE = "tf_keras.api._v1.keras"


def _load(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(
            f"TF1's layers come from the package tf_keras ({exc}), a dependency of tfdist that is missing "
            "here. Install it with pip install 'tf_keras>=2.21,<2.22'."
        ) from exc


def legacy_layers() -> ModuleType:
    """``tf.layers`` of TF1: functional (``dense``) and class (``Dense``) forms."""
    return _load(LEGACY_LAYERS_MODULE)


def v1_keras() -> ModuleType:
    """``tf.keras`` as TF1 graph code saw it (Keras 2, v1 API)."""
    return _load(V1_KERAS_MODULE)


def compile_arguments(model: object) -> dict | None:
    """The arguments a ``tf_keras`` model's ``compile`` was last called with, unserialized (None: never compiled).

    tf_keras keeps them in ``_compile_config.config``, as Keras 3 does; its
    ``get_compile_config()`` serializes them, losing functions and metric objects.
    """
    config = getattr(model, "_compile_config", None)
    return None if config is None else dict(config.config)


def restore_eager_model_class(model: object) -> None:
    """Undoes tf_keras' class swap after its model class was instantiated in a TF1 graph.

    tf_keras picks ``training.Model`` or ``training_v1.Model`` as the base of a
    model *class* (``Sequential``, ``Functional``, a subclass) each time one is
    instantiated: v1 inside a graph. Rebuilding a model in an Estimator graph
    therefore turns every existing eager model of that class into a v1 one
    (``get_weights``/``fit`` then fail; TF's model_to_estimator had the same bug).
    Instantiating the class once more while eager swaps the base back.
    """
    import tensorflow as tf

    if tf.compat.v1.executing_eagerly_outside_functions():
        cls = type(model)
        cls.__new__(cls)


def trusted_deserialization() -> object:
    """tf_keras' scope where ``Lambda`` layers holding Python functions are rebuilt (safe mode off), for a
    config read from a live model object, not from a file."""
    from tf_keras.src.saving import serialization_lib

    return serialization_lib.SafeModeScope(safe_mode=False)
