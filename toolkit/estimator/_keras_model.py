"""What ``model_to_estimator`` reads from a Keras model, whichever Keras made it: Keras 3 or ``tf_keras`` (Keras 2).

TF 2.21's ``tf.keras`` is Keras 3; published TF 2.x code built its models with
Keras 2, which users now reach as ``tf_keras`` (or ``toolkit.compat.v1``'s
``tf.keras``). Both build into a TF1 graph; they differ in where their losses,
custom-object scopes and compile arguments live, and in how their models name
inputs and outputs. ``KerasModel`` answers those questions once, for one model.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["KerasModel", "is_tf_keras"]


def is_tf_keras(model: Any) -> bool:
    """Whether ``model`` is a ``tf_keras`` (Keras 2) model, told by its classes' modules (no import of tf_keras)."""
    return any(cls.__module__.split(".")[0] == "tf_keras" for cls in type(model).__mro__)


def _structure(model: Any, plural: str, singular: str) -> Any:
    """The model's input (or output) structure: a dict, a list, or one tensor."""
    try:
        structure = getattr(model, singular)
    except (AttributeError, ValueError):  # a Sequential never called: only the flat list exists
        structure = None
    if structure is None:
        flat = list(getattr(model, plural, None) or [])
        return flat[0] if len(flat) == 1 else (flat or None)
    return structure


@dataclasses.dataclass(frozen=True)
class KerasModel:
    """One compiled Keras model, as model_to_estimator rebuilds it in each Estimator graph."""

    model: Any
    tf_keras: bool
    custom_objects: Mapping[str, Any]
    config: Any  # the architecture, read once while eager

    @classmethod
    def of(cls, model: Any, custom_objects: Mapping[str, Any] | None) -> KerasModel:
        keras2 = is_tf_keras(model)
        if keras2:
            from toolkit._compat.tf_keras import restore_eager_model_class

            restore_eager_model_class(model)
        return cls(model, keras2, dict(custom_objects or {}), model.get_config())

    def eager_again(self) -> None:
        """After a graph rebuilt the model: the user's own tf_keras model works eagerly again."""
        if self.tf_keras:
            from toolkit._compat.tf_keras import restore_eager_model_class

            restore_eager_model_class(self.model)

    @property
    def keras(self) -> Any:
        if self.tf_keras:
            import tf_keras

            return tf_keras
        import keras

        return keras

    @property
    def is_subclassed(self) -> bool:
        """A model with no graph of layers (its own ``call``): TF rebuilt it fresh, without its weights."""
        return _structure(self.model, "inputs", "input") is None

    def compile_arguments(self) -> dict[str, Any]:
        if self.tf_keras:
            from toolkit._compat.tf_keras import compile_arguments as tf_keras_arguments

            return tf_keras_arguments(self.model) or {}
        from toolkit._compat.keras import compile_arguments

        return compile_arguments(self.model) or {}

    def input_structure(self) -> Any:
        return _structure(self.model, "inputs", "input")

    def input_names(self) -> list[str]:
        """The names features are keyed by (TF: ``keras_model.input_names``); a dict input's keys."""
        structure = self.input_structure()
        if isinstance(structure, Mapping):
            return list(structure)
        if self.tf_keras and getattr(self.model, "input_names", None):
            return list(self.model.input_names)
        flat = structure if isinstance(structure, (list, tuple)) else [structure]
        return [str(getattr(t, "name", f"input_{i + 1}")).split(":")[0] for i, t in enumerate(flat)]

    def output_names(self) -> list[str]:
        """The names labels and predictions are keyed by (TF: ``keras_model.output_names``, the output layers')."""
        structure = _structure(self.model, "outputs", "output")
        if isinstance(structure, Mapping):
            return list(structure)
        names = getattr(self.model, "output_names", None)
        if names:
            return list(names)
        if self.is_subclassed:
            return ["output_1"]
        return [self.model.layers[-1].name]

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """``custom_objects`` visible to ``from_config`` and to losses and metrics named by string."""
        with self.keras.utils.custom_object_scope(dict(self.custom_objects)):
            yield

    def _trusted(self) -> Any:
        """The config comes from the live model, not a file: its Lambda layers' functions are rebuilt too."""
        if self.tf_keras:
            from toolkit._compat.tf_keras import trusted_deserialization as tf_keras_trusted

            return tf_keras_trusted()
        from toolkit._compat.keras import trusted_deserialization

        return trusted_deserialization()

    def rebuild(self) -> Any:
        """A fresh copy of the architecture (its config, without compiled state or weights) in the current graph."""
        import copy

        from toolkit.estimator._construct import EstimatorError

        try:
            with self.scope(), self._trusted():
                return type(self.model).from_config(copy.deepcopy(self.config))
        except (TypeError, ValueError) as exc:
            raise EstimatorError(f"The Keras model {self.model.name!r} cannot be rebuilt from its config: {exc}\n"
                                 "Pass its custom layers and functions as custom_objects={name: object}.",
                                 field="custom_objects") from exc

    @staticmethod
    def variables(model: Any, trainable: bool = False) -> list[Any]:
        """The TensorFlow variables behind a model's weights (Keras 3 wraps each one)."""
        import tensorflow as tf

        weights = model.trainable_weights if trainable else model.weights
        return [w if isinstance(w, tf.Variable) else w.value for w in weights]
