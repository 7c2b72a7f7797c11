"""Serving exports, as ``tf.estimator.export`` had them: receivers, export outputs, and SavedModel writing.

An export is the PREDICT graph, fed by a ``ServingInputReceiver``, with the
checkpoint's variables, written by ``tf.compat.v1.saved_model.Builder`` under
the ``serve`` tag. ``tf.saved_model.load(path).signatures["serving_default"]``
serves it in TF 2. The directory appears whole or not at all: it is written
under a temporary name and renamed.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator._export_outputs import (
    ClassificationOutput,
    EvalOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    TrainOutput,
)
from toolkit.estimator.spec import EstimatorSpec, SpecError

__all__ = ["ClassificationOutput", "EvalOutput", "ExportOutput", "PredictOutput", "RegressionOutput",
           "ServingInputReceiver", "SupervisedInputReceiver", "TensorServingInputReceiver", "TrainOutput",
           "build_parsing_serving_input_receiver_fn", "build_raw_serving_input_receiver_fn",
           "build_raw_supervised_input_receiver_fn", "export_graph"]

v1 = tf.compat.v1
DEFAULT_SERVING_SIGNATURE = "serving_default"


def _is_input_tensor(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor))


def _wrap_and_check(tensors: Any, name: str, *, allow_int_keys: bool = False) -> dict[Any, Any]:
    """TF's checks of a receiver's ``features`` / ``receiver_tensors`` (a lone tensor gets TF's default key)."""
    plural = f"{name}s"
    if tensors is None:
        raise SpecError(f"{plural} must be defined: the receiver's `{plural}` is None; pass the "
                        "tensors (or a dict of them).", field=plural)
    if not isinstance(tensors, Mapping):
        tensors = {"input" if name == "receiver_tensor" else name: tensors}
    out = {}
    for key, value in tensors.items():
        keys_ok = isinstance(key, str) or (allow_int_keys and isinstance(key, int) and not isinstance(key, bool))
        if not keys_ok:
            kinds = "strings or ints" if allow_int_keys else "strings"
            raise SpecError(f"{name} keys must be {kinds}: got {key!r} in the receiver's `{plural}`.",
                            field=plural)
        if not _is_input_tensor(value) and hasattr(value, "tensor"):
            value = tf.convert_to_tensor(value)  # a wrapper with a registered tensor conversion
        if not _is_input_tensor(value):
            what = "a Tensor, SparseTensor, or RaggedTensor" if name == "feature" else "a Tensor"
            raise SpecError(f"{name} {key} must be {what}; got {type(value).__name__} {value!r:.60} in "
                            f"the receiver's `{plural}`.", field=f"{plural}.{key}")
        out[key] = value
    return out


def _check_alternatives(alternatives: Any) -> Any:
    if alternatives is None:
        return None
    if not isinstance(alternatives, Mapping):
        raise SpecError(f"receiver_tensors_alternatives must be a dict; got {alternatives!r:.80}.",
                        field="receiver_tensors_alternatives")
    return {name: _wrap_and_check(tensors, "receiver_tensor") for name, tensors in alternatives.items()}


@dataclasses.dataclass(frozen=True)
class ServingInputReceiver:
    """The serving graph's inputs: ``features`` for model_fn, ``receiver_tensors`` fed by the client.

    As in TF, a lone features tensor reaches model_fn as ``{"feature": tensor}`` and a lone
    receiver tensor is named ``input``; ``TensorServingInputReceiver`` passes a lone tensor as it is.
    """

    features: Any
    receiver_tensors: Any
    receiver_tensors_alternatives: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", self._features(self.features))
        object.__setattr__(self, "receiver_tensors", _wrap_and_check(self.receiver_tensors, "receiver_tensor"))
        object.__setattr__(self, "receiver_tensors_alternatives",
                           _check_alternatives(self.receiver_tensors_alternatives))

    @staticmethod
    def _features(features: Any) -> Any:
        return _wrap_and_check(features, "feature", allow_int_keys=True)


@dataclasses.dataclass(frozen=True)
class TensorServingInputReceiver(ServingInputReceiver):
    """A receiver whose ``features`` is one tensor, passed to model_fn as it is (not in a dict)."""

    @staticmethod
    def _features(features: Any) -> Any:
        if features is None:
            raise SpecError("features must be defined: TensorServingInputReceiver `features` is None; pass "
                            "the tensor model_fn reads.", field="features")
        if not _is_input_tensor(features):
            raise SpecError(f"feature must be a Tensor, SparseTensor, or RaggedTensor; "
                            f"TensorServingInputReceiver `features` is {type(features).__name__}. Use "
                            "ServingInputReceiver for a dict of features.", field="features")
        return features


@dataclasses.dataclass(frozen=True)
class SupervisedInputReceiver:
    """Features and labels, fed by ``receiver_tensors``, for exporting TRAIN and EVAL graphs."""

    features: Any
    labels: Any
    receiver_tensors: Any

    def __post_init__(self) -> None:
        if not _is_input_tensor(self.features):
            object.__setattr__(self, "features", _wrap_and_check(self.features, "feature"))
        if not _is_input_tensor(self.labels):
            object.__setattr__(self, "labels", _wrap_and_check(self.labels, "label"))
        object.__setattr__(self, "receiver_tensors", _wrap_and_check(self.receiver_tensors, "receiver_tensor"))


def build_parsing_serving_input_receiver_fn(
        feature_spec: Mapping[str, Any], default_batch_size: int | None = None,
) -> Callable[[], ServingInputReceiver]:
    """Serving from serialized ``tf.Example`` protos (the ``examples`` input), parsed with ``feature_spec``."""

    def serving_input_receiver_fn() -> ServingInputReceiver:
        serialized = v1.placeholder(tf.string, shape=[default_batch_size], name="input_example_tensor")
        features = tf.io.parse_example(serialized, feature_spec)
        return ServingInputReceiver(features, {"examples": serialized})

    return serving_input_receiver_fn


def _placeholder(tensor: Any, default_batch_size: int | None, name: str | None = None) -> Any:
    shape = tensor.shape
    if shape.rank is not None and shape.rank > 0:
        shape = [default_batch_size, *shape[1:]]
    return v1.placeholder(tensor.dtype, shape=shape, name=name)


def _placeholders(values: Any, default_batch_size: int | None) -> Any:
    if isinstance(values, Mapping):
        return {name: _placeholder(t, default_batch_size, name) for name, t in values.items()}
    return _placeholder(values, default_batch_size)


def build_raw_serving_input_receiver_fn(features: Any, default_batch_size: int | None = None
                                        ) -> Callable[[], ServingInputReceiver]:
    """Serving from raw tensors shaped like ``features`` (a tensor or dict of tensors), batch first."""

    def serving_input_receiver_fn() -> ServingInputReceiver:
        placeholders = _placeholders(features, default_batch_size)
        return ServingInputReceiver(placeholders, placeholders)

    return serving_input_receiver_fn


def build_raw_supervised_input_receiver_fn(features: Any, labels: Any, default_batch_size: int | None = None
                                           ) -> Callable[[], SupervisedInputReceiver]:
    """Raw features and labels, for exporting the TRAIN and EVAL graphs (``experimental``)."""
    if isinstance(features, Mapping) and isinstance(labels, Mapping):
        overlap = set(features) & set(labels)
        if overlap:
            raise SpecError(f"Features and labels must have distinct keys; both have {sorted(overlap)}. "
                            "Rename the labels.", field="labels")

    def supervised_input_receiver_fn() -> SupervisedInputReceiver:
        feats = _placeholders(features, default_batch_size)
        labs = _placeholders(labels, default_batch_size)
        receivers = dict(feats) if isinstance(feats, Mapping) else {"input": feats}
        receivers.update(labs if isinstance(labs, Mapping) else {"label": labs})
        return SupervisedInputReceiver(feats, labs, receivers)

    return supervised_input_receiver_fn


def _signatures(spec: EstimatorSpec, receiver: ServingInputReceiver) -> dict[str, Any]:
    outputs = dict(spec.export_outputs or {})
    if not outputs:
        outputs = {DEFAULT_SERVING_SIGNATURE: PredictOutput(spec.predictions)}
    if DEFAULT_SERVING_SIGNATURE not in outputs:
        if len(outputs) != 1:
            raise SpecError(f"EstimatorSpec `export_outputs` has {sorted(outputs)} but no "
                            f"'{DEFAULT_SERVING_SIGNATURE}'; name one of them '{DEFAULT_SERVING_SIGNATURE}'.",
                            field="export_outputs")
        outputs[DEFAULT_SERVING_SIGNATURE] = next(iter(outputs.values()))
    for name, output in outputs.items():
        if not callable(getattr(output, "as_signature_def", None)):
            raise SpecError(f"EstimatorSpec `export_outputs[{name!r}]` is {type(output).__name__}; "
                            "expected PredictOutput, ClassificationOutput or RegressionOutput.",
                            field=f"export_outputs.{name}")
    return {name: output.as_signature_def(receiver.receiver_tensors) for name, output in outputs.items()}


def _fresh_dir(base: str) -> str:
    stamp = int(time.time())
    while os.path.exists(os.path.join(base, str(stamp))):
        stamp += 1
    return os.path.join(base, str(stamp))


def _publish(temp_dir: str, export_dir: str, assets_extra: Mapping[str, str] | None) -> None:
    """Copies ``assets_extra`` ({path in the export: source file}) into the finished SavedModel, then moves it into
    place: a reader never sees a half-written export."""
    for dest, source in (assets_extra or {}).items():
        target = os.path.join(temp_dir, "assets.extra", dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(source, target)
    os.rename(temp_dir, export_dir)


def export_graph(spec: EstimatorSpec, receiver: ServingInputReceiver, scaffold: Any, checkpoint: str, base: str, *,
                 as_text: bool, assets_extra: Mapping[str, str] | None, error: Callable[..., Exception]) -> str:
    """Writes the current graph with ``checkpoint``'s variables as a SavedModel; returns its directory."""
    signatures = _signatures(spec, receiver)
    main_op = v1.group(v1.local_variables_initializer(), v1.tables_initializer())
    saver = scaffold.saver or v1.get_collection(v1.GraphKeys.SAVERS)[0]
    saver.build()
    export_dir = _fresh_dir(base)
    temp_dir = os.path.join(base, f"temp-{os.path.basename(export_dir)}")
    os.makedirs(base, exist_ok=True)
    try:
        with v1.Session() as session:
            try:
                saver.restore(session, checkpoint)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as exc:
                raise error(checkpoint, exc) from exc
            builder = v1.saved_model.Builder(temp_dir)
            builder.add_meta_graph_and_variables(
                session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures,
                main_op=main_op,
                strip_default_attrs=True, saver=saver)
            builder.save(as_text=as_text)
        _publish(temp_dir, export_dir, assets_extra)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return export_dir
