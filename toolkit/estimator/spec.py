"""The Estimator contract, as ``tf.estimator`` defined it: ``ModeKeys``, ``EstimatorSpec``, ``TrainSpec``, ``EvalSpec``.

A ``model_fn(features, labels, mode, params, config)`` is called inside a
``tf.Graph`` with graph tensors, builds TF1 ops (``tf.compat.v1.layers`` /
``tf_keras`` legacy layers, ``tf.compat.v1.losses``, ``tf.compat.v1.metrics``,
an optimizer's ``minimize(loss, global_step=...)``) and returns an
``EstimatorSpec`` with every field TF had. This module is pure Python; the
checks that need TensorFlow (is ``loss`` a scalar tensor, ...) live in the
engine.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tf_config.checks import check_int, check_number
from tf_config.errors import FieldError

__all__ = ["EstimatorSpec", "EvalSpec", "ModeKeys", "SpecError", "SpecTypeError", "TrainSpec"]


class SpecError(FieldError):
    """A spec or model_fn result is invalid; ``.field`` names the argument."""


class SpecTypeError(SpecError, TypeError):
    """A spec field of the wrong type (where ``tf.estimator`` raised ``TypeError``)."""


class ModeKeys:
    """The three modes a model_fn is called in (``tf.estimator.ModeKeys``' values)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"
    ALL = (TRAIN, EVAL, PREDICT)


def _check_mode(mode: Any) -> None:
    if mode is not None and mode not in ModeKeys.ALL:
        raise SpecError(f"EstimatorSpec `mode` is {mode!r}; expected one of ModeKeys.TRAIN ('train'), "
                        "ModeKeys.EVAL ('eval'), ModeKeys.PREDICT ('infer'). Pass the `mode` model_fn received.",
                        field="mode")


def is_metric_object(value: Any) -> bool:
    """A Keras (tf_keras) metric object: has ``result()`` and ``update_state()``."""
    return callable(getattr(value, "result", None)) and callable(getattr(value, "update_state", None))


_HOOK_FIELDS = ("training_chief_hooks", "training_hooks", "evaluation_hooks", "prediction_hooks")


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    """What a model_fn returns (``tf.estimator.EstimatorSpec``'s fields and rules).

    Attributes:
        mode: the ``ModeKeys`` value model_fn was called with.
        predictions: a tensor or dict of tensors (required in PREDICT).
        loss: scalar loss tensor (required in TRAIN and EVAL).
        train_op: the op that runs one training step (required in TRAIN),
            e.g. ``optimizer.minimize(loss, global_step=tf.train.get_global_step())``.
        eval_metric_ops: ``{name: (value, update_op)}`` as returned by
            ``tf.compat.v1.metrics.*``, or ``{name: metric}`` with a tf_keras
            metric object already updated in model_fn.
        export_outputs: ``{signature name: PredictOutput/ClassificationOutput/
            RegressionOutput}`` for ``export_saved_model``.
        training_chief_hooks / training_hooks / evaluation_hooks /
        prediction_hooks: ``tf.compat.v1.train.SessionRunHook`` lists.
        scaffold: a ``tf.compat.v1.train.Scaffold`` (init ops, saver, ...).
    """

    mode: str
    predictions: Any = None
    loss: Any = None
    train_op: Any = None
    eval_metric_ops: Mapping[str, Any] | None = None
    export_outputs: Mapping[str, Any] | None = None
    training_chief_hooks: Sequence[Any] | None = None
    training_hooks: Sequence[Any] | None = None
    scaffold: Any = None
    evaluation_hooks: Sequence[Any] | None = None
    prediction_hooks: Sequence[Any] | None = None

    def __post_init__(self) -> None:
        from toolkit.estimator import _spec_checks as checks  # TensorFlow: only once a spec is built

        _check_mode(self.mode)
        if self.mode == ModeKeys.TRAIN:
            self._require("loss", "the scalar to minimise, e.g. tf.losses.sparse_softmax_cross_entropy(labels, logits)")
        if self.mode == ModeKeys.EVAL:
            self._require("loss", "the evaluation loss")
        if self.mode == ModeKeys.TRAIN:
            self._require("train_op", "e.g. train_op=optimizer.minimize(loss, global_step=tf.train.get_global_step())")
        if self.mode == ModeKeys.PREDICT:
            self._require("predictions", "a tensor or a dict of tensors, e.g. {'class_ids': ...}")
        changes: dict[str, Any] = {}
        if self.train_op is not None:
            changes["train_op"] = checks.check_train_op(self.train_op)
        if self.loss is not None:
            changes["loss"] = checks.check_loss(self.loss, self.mode)
        changes["predictions"] = checks.check_predictions(self.predictions, self.mode)
        changes["export_outputs"] = checks.check_export_outputs(self.export_outputs, changes["predictions"], self.mode)
        for field in _HOOK_FIELDS:
            changes[field] = checks.check_hooks(field, getattr(self, field))
        changes["eval_metric_ops"] = checks.check_metrics(self.eval_metric_ops)
        changes["scaffold"] = checks.check_scaffold(self.scaffold)
        for field, value in changes.items():
            object.__setattr__(self, field, value)

    def _require(self, field: str, what: str) -> None:
        if getattr(self, field) is None:
            raise SpecError(f"Missing {field}: EstimatorSpec in mode {self.mode!r} needs `{field}` ({what}); "
                            "received None.", field=field)

    def _replace(self, **changes: Any) -> EstimatorSpec:
        """A copy with ``changes``, checked again (TF's EstimatorSpec was a namedtuple); the mode stays."""
        if "mode" in changes and changes["mode"] != self.mode:
            raise SpecError(f"mode of EstimatorSpec cannot be changed: it is {self.mode!r}, `mode` "
                            f"{changes['mode']!r} was passed. Build a new EstimatorSpec for another mode.",
                            field="mode")
        return dataclasses.replace(self, **changes)


def _check_input_fn(owner: str, input_fn: Any) -> None:
    if not callable(input_fn):
        raise SpecError(f"{owner} `input_fn` is {type(input_fn).__name__}; expected a function "
                        "returning a tf.data.Dataset of (features, labels) batches.", field="input_fn")


def _check_hook_list(owner: str, hooks: Any) -> tuple[Any, ...]:
    hooks = tuple(hooks or ())
    if any(not hasattr(h, "before_run") for h in hooks):
        raise SpecError(f"{owner} `hooks` is {hooks!r}; expected SessionRunHook objects.", field="hooks")
    return hooks


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """How ``train_and_evaluate`` trains (``tf.estimator.TrainSpec``).

    Attributes:
        input_fn: returns a Dataset of ``(features, labels)`` (or a tuple of tensors).
        max_steps: the global step at which training stops (None: until the input ends).
        hooks: extra ``SessionRunHook`` objects for training.
    """

    input_fn: Callable[..., Any]
    max_steps: int | None = None
    hooks: Sequence[Any] = ()

    def __post_init__(self) -> None:
        _check_input_fn("TrainSpec", self.input_fn)
        check_int(self.max_steps, field="max_steps", optional=True, error=SpecError, owner="TrainSpec", example=1000)
        object.__setattr__(self, "hooks", _check_hook_list("TrainSpec", self.hooks))


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How ``train_and_evaluate`` evaluates and exports (``tf.estimator.EvalSpec``, TF's defaults).

    Attributes:
        input_fn: evaluation batches.
        steps: evaluation batches per evaluation (None: until the input ends); TF's default 100.
        name: evaluation name; summaries go to ``model_dir/eval_<name>``.
        hooks: ``SessionRunHook`` objects for evaluation.
        exporters: ``LatestExporter`` / ``BestExporter`` / ``FinalExporter`` (or a list of them).
        start_delay_secs: the evaluator waits this long before its first evaluation.
        throttle_secs: at most one evaluation per this many seconds (the final checkpoint is always evaluated).
    """

    input_fn: Callable[..., Any]
    steps: int | None = 100
    name: str | None = None
    hooks: Sequence[Any] = ()
    exporters: Any = ()
    start_delay_secs: float = 120
    throttle_secs: float = 600

    def __post_init__(self) -> None:
        _check_input_fn("EvalSpec", self.input_fn)
        check_int(self.steps, field="steps", optional=True, error=SpecError, owner="EvalSpec",
                  fix="None evaluates the whole dataset.", example=None)
        for field in ("start_delay_secs", "throttle_secs"):
            check_number(getattr(self, field), field=field, strict=False, error=SpecError, owner="EvalSpec",
                         unit="seconds", example=10)
        bad_name = not isinstance(self.name, str) or not self.name or "/" in self.name or "\\" in self.name \
            or self.name in (".", "..")
        if self.name is not None and bad_name:
            raise SpecError(f"EvalSpec `name` is {self.name!r}; expected a non-empty string without '/' (it names "
                            "the directory model_dir/eval_<name>), e.g. 'census-eval'.", field="name")
        object.__setattr__(self, "hooks", _check_hook_list("EvalSpec", self.hooks))
        exporters = self.exporters
        exporters = (exporters,) if hasattr(exporters, "export") else tuple(exporters or ())
        if any(not callable(getattr(e, "export", None)) for e in exporters):
            raise SpecError(f"EvalSpec `exporters` is {self.exporters!r}; expected LatestExporter, "
                            "BestExporter or FinalExporter objects.", field="exporters")
        names = [e.name for e in exporters]
        if len(set(names)) != len(names):
            raise SpecError(f"EvalSpec `exporters` have repeated names {names}; give each a unique name.",
                field="exporters")
        object.__setattr__(self, "exporters", exporters)
