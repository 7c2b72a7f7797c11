"""An ``input_fn``'s features and labels as a Keras model's inputs and targets, as TF's ``keras_lib`` took them.

Features may be one tensor, a list/tuple in the model's input order, or a dict
keyed by the model's input names (extra keys are ignored); labels likewise,
keyed by output names. ``{"features": ..., "sample_weights": ...}`` carries
sample weights (one per example, or one such per output), as TF documented.
A dict that misses a name raises ``KerasIOError`` (a ``KeyError``, as TF's
``FormattedKeyError``) listing the expected, given and missed keys.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.estimator._construct import EstimatorError

__all__ = ["KerasIOError", "missed_keys_error", "per_output_weights", "split_sample_weights", "to_inputs", "to_targets"]


class KerasIOError(EstimatorError, KeyError):
    """input_fn's features or labels do not cover the Keras model's inputs or outputs (TF: FormattedKeyError)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def missed_keys_error(obj_name: str, order_name: str, expected: Sequence[str], given: Sequence[str],
                      fix: str) -> KerasIOError:
    missed = sorted(set(expected) - set(given))
    return KerasIOError(
        f"The dictionary passed into {obj_name} does not cover requested {order_name} keys defined in the keras "
        f"model.\n\tExpected keys: {sorted(set(expected))}\n\t{obj_name} keys: {sorted(set(given))}"
        f"\n\tMissed keys: {missed}\n{fix}", field=obj_name)


def split_sample_weights(features: Any) -> tuple[Any, Any]:
    """``({"features": x, "sample_weights": w})`` -> ``(x, w)``; other features -> ``(features, None)``."""
    if isinstance(features, Mapping) and set(features) == {"features", "sample_weights"}:
        return features["features"], features["sample_weights"]
    return features, None


def _ordered(obj: Any, names: list[str], obj_name: str, order_name: str, fix: str) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return list(obj)
    if isinstance(obj, Mapping):
        if set(names) - set(obj):
            raise missed_keys_error(obj_name, order_name, names, list(obj), fix)
        return [obj[name] for name in names]
    return [obj]


def to_inputs(features: Any, names: list[str], structure: Any) -> Any:
    """The model's call argument: its input structure (a dict input stays a dict) filled from ``features``."""
    if isinstance(features, Mapping) and len(names) == 1 and len(features) == 1:
        features = next(iter(features.values()))  # one input, one feature: TF 2's `dense_input` keys keep working
    fix = "Name the features after the model's Input layers (keras.Input(..., name=...))."
    values = _ordered(features, names, "features", "inputs", fix)
    if isinstance(structure, Mapping):
        return dict(zip(names, values, strict=False))
    return values[0] if len(values) == 1 else values


def to_targets(labels: Any, names: list[str]) -> list[Any]:
    """One label tensor per output, in the model's output order."""
    fix = "Key the labels by the model's output names (its output layers' names)."
    targets = _ordered(labels, names, "labels", "outputs", fix)
    if len(targets) != len(names):
        raise EstimatorError(f"input_fn's labels hold {len(targets)} values but the Keras model has {len(names)} "
                             f"outputs {names}; give one label per output (a list in output order, or a dict keyed "
                             "by output name).", field="labels")
    return targets


def per_output_weights(weights: Any, names: list[str]) -> list[Any]:
    """Sample weights for each output (TF's ``standardize_sample_weights``)."""
    if weights is None:
        return [None] * len(names)
    if isinstance(weights, Mapping):
        return [weights.get(name) for name in names]
    if isinstance(weights, (list, tuple)) and len(names) > 1:
        if len(weights) != len(names):
            raise EstimatorError(f"`sample_weights` holds {len(weights)} values for {len(names)} outputs {names}; "
                                 "give one per output, or a dict keyed by output name.", field="sample_weights")
        return list(weights)
    return [weights] * len(names)
