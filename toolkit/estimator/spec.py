"""The Estimator contract for TF 2: ``ModeKeys``, ``EstimatorSpec``, ``TrainSpec``, ``EvalSpec``.

A TF1 ``model_fn(features, labels, mode, params)`` built graph ops and
returned an ``EstimatorSpec`` holding tensors and a ``train_op``. Here the
same function is called with **symbolic** Keras inputs (``keras.Input``
shaped like the input_fn's batches) and written with Keras layers and
``keras.ops``; the Estimator turns what it returns into a Keras functional
model per mode and lets the toolkit's training engine run it under any
strategy. How a TF1 model_fn maps onto it:

=============================  =============================================
TF1                            TF2 (here)
=============================  =============================================
``tf.layers.dense(x, 10)``     ``keras.layers.Dense(10)(x)``
``tf.nn.softmax``, ``tf.argmax``  ``keras.ops.softmax``, ``keras.ops.argmax``
``loss=tf.losses.sparse_...``  ``loss=keras.losses.sparse_categorical_crossentropy(
                               labels, logits, from_logits=True)`` (per example or scalar)
``train_op=opt.minimize(...)`` ``optimizer=keras.optimizers.Adam(...)``; the
                               engine computes gradients and applies them
``eval_metric_ops={"acc":      ``eval_metric_ops={"accuracy":
tf.metrics.accuracy(...)}``    keras.metrics.sparse_categorical_accuracy(labels, logits)}``
                               (per-example values; the mean over the eval set is exact)
``tf.train.get_global_step()`` not needed: the engine keeps an atomic global step
=============================  =============================================
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["ModeKeys", "EstimatorSpec", "TrainSpec", "EvalSpec", "SpecError"]


class SpecError(ValueError):
    """A spec or model_fn result is invalid; ``.field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class ModeKeys:
    """The three modes a model_fn is called in (Estimator's values)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"
    ALL = (TRAIN, EVAL, PREDICT)


def _check_mode(mode: Any) -> None:
    if mode not in ModeKeys.ALL:
        raise SpecError("mode", f"EstimatorSpec `mode` is {mode!r}; expected one of ModeKeys.TRAIN ('train'), "
                        "ModeKeys.EVAL ('eval'), ModeKeys.PREDICT ('infer'). Pass the `mode` model_fn received.")


def _is_optimizer(value: Any) -> bool:
    return callable(getattr(value, "apply_gradients", None)) and hasattr(value, "get_config")


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    """What a model_fn returns, for TF 2.

    Attributes:
        mode: the ``ModeKeys`` value model_fn was called with.
        predictions: a tensor or dict of tensors (required in PREDICT).
        loss: per-example or scalar loss tensor (required in TRAIN and EVAL).
        optimizer: a Keras 3 optimizer (required in TRAIN); replaces TF1's
            ``train_op``. ``train_op=`` is accepted as an alias when it holds
            an optimizer.
        eval_metric_ops: ``{name: per-example values}``; means over the
            evaluation set are reported by ``evaluate``.
    """

    mode: str
    predictions: Any = None
    loss: Any = None
    optimizer: Any = None
    train_op: Any = None
    eval_metric_ops: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        if self.train_op is not None:
            if not _is_optimizer(self.train_op):
                raise SpecError(
                    "train_op",
                    f"EstimatorSpec `train_op` is {type(self.train_op).__name__}; in TF 2 there is no graph op "
                    "to run. Pass the optimizer instead: EstimatorSpec(mode, loss=loss, "
                    "optimizer=keras.optimizers.Adam(0.001)).",
                )
            if self.optimizer is not None and self.optimizer is not self.train_op:
                raise SpecError("train_op", "EstimatorSpec got both `optimizer` and `train_op`; pass only `optimizer`.")
            object.__setattr__(self, "optimizer", self.train_op)
        if self.mode == ModeKeys.TRAIN:
            self._require("loss", "the value to minimise, e.g. keras.losses.sparse_categorical_crossentropy("
                          "labels, logits, from_logits=True)")
            self._require("optimizer", "e.g. optimizer=keras.optimizers.Adam(0.001)")
            if not _is_optimizer(self.optimizer):
                raise SpecError("optimizer", f"EstimatorSpec `optimizer` is {type(self.optimizer).__name__}; "
                                "expected a Keras 3 optimizer such as keras.optimizers.Adam(0.001).")
        if self.mode == ModeKeys.EVAL:
            self._require("loss", "the evaluation loss")
        if self.mode == ModeKeys.PREDICT:
            self._require("predictions", "a tensor or a dict of tensors, e.g. {'classes': ...}")
        self._check_metrics()

    def _require(self, field: str, what: str) -> None:
        if getattr(self, field) is None:
            raise SpecError(field, f"EstimatorSpec in mode {self.mode!r} needs `{field}` ({what}); received None.")

    def _check_metrics(self) -> None:
        metrics = self.eval_metric_ops
        if metrics is None:
            object.__setattr__(self, "eval_metric_ops", {})
            return
        if not isinstance(metrics, Mapping):
            raise SpecError("eval_metric_ops", f"EstimatorSpec `eval_metric_ops` is {type(metrics).__name__}; "
                            "expected a dict {name: per-example values}.")
        for name, value in metrics.items():
            if not isinstance(name, str) or not name or name in ("loss", "global_step"):
                raise SpecError("eval_metric_ops", f"EstimatorSpec `eval_metric_ops` has the name {name!r}; "
                                "use a non-empty string other than 'loss' and 'global_step' (both reported already).")
            if isinstance(value, tuple):
                raise SpecError(
                    f"eval_metric_ops.{name}",
                    f"EstimatorSpec `eval_metric_ops[{name!r}]` is a tuple, TF1's (value_op, update_op); in TF 2 "
                    "pass per-example values instead, e.g. keras.metrics.sparse_categorical_accuracy(labels, "
                    "logits). Their mean over the evaluation set is reported.",
                )
        object.__setattr__(self, "eval_metric_ops", dict(metrics))


def _check_input_fn(owner: str, input_fn: Any) -> None:
    if not callable(input_fn):
        raise SpecError("input_fn", f"{owner} `input_fn` is {type(input_fn).__name__}; expected a function "
                        "returning a tf.data.Dataset of (features, labels) batches.")


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """How ``train_and_evaluate`` trains: the input and the final global step.

    Attributes:
        input_fn: ``input_fn()`` or ``input_fn(input_context)`` returning a
            dataset of batched ``(features, labels)``, repeated as needed.
        max_steps: train until the global step reaches this.
    """

    input_fn: Callable[..., Any]
    max_steps: int

    def __post_init__(self) -> None:
        _check_input_fn("TrainSpec", self.input_fn)
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise SpecError("max_steps", f"TrainSpec `max_steps` is {self.max_steps!r}; expected a positive int "
                            "(the global step at which training stops), e.g. max_steps=1000.")


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How ``train_and_evaluate`` evaluates.

    Attributes:
        input_fn: returns a finite dataset of ``(features, labels)`` batches.
        steps: batches per evaluation (None: the whole dataset).
        start_delay_secs: the evaluator waits this long before its first look.
        throttle_secs: at least this long between two evaluations; checkpoints
            that arrive in between are skipped, except the final one.
        name: tag of this evaluation (``eval`` or ``eval_<name>`` directory).
    """

    input_fn: Callable[..., Any]
    steps: int | None = 100
    start_delay_secs: float = 0.0
    throttle_secs: float = 0.0
    name: str | None = None

    def __post_init__(self) -> None:
        _check_input_fn("EvalSpec", self.input_fn)
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int)
                                       or self.steps < 1):
            raise SpecError("steps", f"EvalSpec `steps` is {self.steps!r}; expected a positive int or None "
                            "(the whole dataset).")
        for field in ("start_delay_secs", "throttle_secs"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise SpecError(field, f"EvalSpec `{field}` is {value!r}; expected seconds >= 0, e.g. {field}=10.")
        if self.name is not None and not (isinstance(self.name, str) and self.name.replace("_", "").isalnum()):
            raise SpecError("name", f"EvalSpec `name` is {self.name!r}; expected letters, digits and '_' "
                            "(it becomes a directory name).")
