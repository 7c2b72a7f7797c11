"""``tf.estimator.export``'s output signatures: ``ExportOutput`` and its kinds, with TF's checks and errors."""
from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator._spec_base import SpecError

__all__ = ["ClassificationOutput", "EvalOutput", "ExportOutput", "PredictOutput", "RegressionOutput", "TrainOutput"]

v1 = tf.compat.v1
_sig = v1.saved_model.signature_def_utils


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable))


def _single_string_input(receiver_tensors: Mapping[str, Any]) -> Any:
    values = list(receiver_tensors.values())
    return values[0] if len(values) == 1 and values[0].dtype == tf.string else None


class ExportOutput(abc.ABC):
    """One signature of an export (``tf.estimator.export.ExportOutput``): subclasses build its SignatureDef."""

    _SEPARATOR_CHAR = "/"

    @abc.abstractmethod
    def as_signature_def(self, receiver_tensors: Mapping[str, Any]) -> Any:
        """The SignatureDef serving this output from ``receiver_tensors``."""

    def _check_output_key(self, key: Any, error_label: str) -> str:
        if isinstance(key, tuple):
            key = self._SEPARATOR_CHAR.join(key)
        if not isinstance(key, str):
            raise SpecError(f"{error_label} output key must be a string; got {key!r}. Name each output with a "
                            "string, e.g. {'scores': ...}.", field="outputs")
        return key


class ClassificationOutput(ExportOutput):
    """A classify signature: float32 ``scores`` and/or string ``classes``."""

    def __init__(self, scores: Any = None, classes: Any = None) -> None:
        if scores is not None and not (_is_tensor(scores) and scores.dtype == tf.float32):
            raise SpecError(f"Classification scores must be a float32 Tensor; got {scores!r}. Cast them with "
                            "tf.cast(scores, tf.float32).", field="scores")
        if classes is not None and not (_is_tensor(classes) and classes.dtype == tf.string):
            raise SpecError(f"Classification classes must be a string Tensor; got {classes!r}. Convert class "
                            "ids with tf.strings.as_string(ids).", field="classes")
        if scores is None and classes is None:
            raise SpecError("At least one of scores and classes must be set: ClassificationOutput got neither. "
                            "Pass scores=..., classes=... or both.", field="ClassificationOutput")
        self.scores, self.classes = scores, classes

    def as_signature_def(self, receiver_tensors: Mapping[str, Any]) -> Any:
        examples = _single_string_input(receiver_tensors)
        if examples is None:
            return PredictOutput({k: v for k, v in (("scores", self.scores), ("classes", self.classes))
                                  if v is not None}).as_signature_def(receiver_tensors)
        return _sig.classification_signature_def(examples, self.classes, self.scores)


class RegressionOutput(ExportOutput):
    """A regress signature over one float32 tensor."""

    def __init__(self, value: Any) -> None:
        if not (_is_tensor(value) and value.dtype == tf.float32):
            raise SpecError(f"Regression output value must be a float32 Tensor; got {value!r}. Cast it with "
                            "tf.cast(value, tf.float32).", field="value")
        self.value = value

    def as_signature_def(self, receiver_tensors: Mapping[str, Any]) -> Any:
        examples = _single_string_input(receiver_tensors)
        if examples is None:
            return PredictOutput({"outputs": self.value}).as_signature_def(receiver_tensors)
        return _sig.regression_signature_def(examples, self.value)


class PredictOutput(ExportOutput):
    """A predict signature over a tensor (named ``output``) or a dict of tensors."""

    _SINGLE_OUTPUT_DEFAULT_NAME = "output"

    def __init__(self, outputs: Any) -> None:
        if not isinstance(outputs, Mapping):
            outputs = {self._SINGLE_OUTPUT_DEFAULT_NAME: outputs}
        checked = {}
        for key, value in outputs.items():
            key = self._check_output_key(key, "Prediction")
            if not _is_tensor(value) and not isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
                raise SpecError(f"Prediction output value must be a Tensor; got {key}={value!r:.80}. Return "
                                "tensors from model_fn.", field=f"outputs.{key}")
            checked[key] = value
        self.outputs = checked

    def as_signature_def(self, receiver_tensors: Mapping[str, Any]) -> Any:
        return _sig.predict_signature_def(receiver_tensors, self.outputs)


class _SupervisedOutput(ExportOutput):
    """Loss, predictions and metrics of a TRAIN or EVAL graph, flattened to TF's signature keys."""

    LOSS_NAME, PREDICTIONS_NAME, METRICS_NAME = "loss", "predictions", "metrics"
    METRIC_VALUE_SUFFIX, METRIC_UPDATE_SUFFIX = "value", "update_op"
    _METHOD = ""

    def __init__(self, loss: Any = None, predictions: Any = None, metrics: Any = None) -> None:
        self.loss = self._wrap(loss, self.LOSS_NAME)
        self.predictions = self._wrap(predictions, self.PREDICTIONS_NAME)
        self.metrics = self._metrics(metrics)

    def _wrap(self, value: Any, name: str) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            return {name: value}
        return {f"{name}{self._SEPARATOR_CHAR}{self._check_output_key(k, name)}": v for k, v in value.items()}

    def _metrics(self, metrics: Any) -> dict[str, Any] | None:
        if metrics is None:
            return None
        if not isinstance(metrics, Mapping):
            metrics = {self.METRICS_NAME: metrics}
        out = {}
        for key, pair in metrics.items():
            key = self._check_output_key(key, self.METRICS_NAME)
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise SpecError(f"metrics[{key}] must be a (metric_value, update_op) tuple; got {pair!r:.80}.",
                                field=f"metrics.{key}")
            base = f"{self.METRICS_NAME}{self._SEPARATOR_CHAR}{key}{self._SEPARATOR_CHAR}"
            out[base + self.METRIC_VALUE_SUFFIX] = pair[0]
            update = pair[1]
            out[base + self.METRIC_UPDATE_SUFFIX] = update.outputs[0] if isinstance(update, tf.Operation) and \
                update.outputs else (update if _is_tensor(update) else tf.constant(0))
        return out

    def as_signature_def(self, receiver_tensors: Mapping[str, Any]) -> Any:
        outputs = {**(self.loss or {}), **(self.predictions or {}), **(self.metrics or {})}
        return _sig.build_signature_def(
            {k: v1.saved_model.utils.build_tensor_info(t) for k, t in receiver_tensors.items()},
            {k: v1.saved_model.utils.build_tensor_info(t) for k, t in outputs.items()}, self._METHOD)


class TrainOutput(_SupervisedOutput):
    """The TRAIN graph's signature (``tensorflow/supervised/training``)."""

    _METHOD = "tensorflow/supervised/training"


class EvalOutput(_SupervisedOutput):
    """The EVAL graph's signature (``tensorflow/supervised/eval``)."""

    _METHOD = "tensorflow/supervised/eval"
