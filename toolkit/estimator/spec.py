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

from toolkit.estimator._spec_base import ModeKeys, SpecError, SpecTypeError, check_eval_name

__all__ = ["EstimatorSpec", "EvalSpec", "ModeKeys", "SpecError", "SpecTypeError", "TrainSpec"]


def _check_mode(mode: Any) -> None:
    if mode is not None and mode not in ModeKeys.ALL:
        raise SpecError(f"EstimatorSpec `mode` is {mode!r}; expected one of ModeKeys.TRAIN ('train'), "
                        "ModeKeys.EVAL ('eval'), ModeKeys.PREDICT ('infer'). Pass the `mode` model_fn received.",
                        field="mode")


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
            self._require("train_op", "e.g. train_op=optimizer.minimize(loss, global_step=tf.train.get_global_step())")
        if self.mode == ModeKeys.EVAL:
            self._require("loss", "the evaluation loss")
        if self.mode == ModeKeys.PREDICT:
            self._require("predictions", "a tensor or a dict of tensors, e.g. {'class_ids': ...}")
        changes: dict[str, Any] = {}
        if self.train_op is not None:
            changes["train_op"] = checks.check_train_op(self.train_op)
        if self.loss is not None:
            changes["loss"] = checks.check_loss(self.loss)
        changes["predictions"] = checks.check_predictions(self.predictions)
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
        raise SpecTypeError(f"`input_fn` must be callable, given: {input_fn!r:.80}. {owner} `input_fn` is "
                            f"{type(input_fn).__name__}; expected a function returning a tf.data.Dataset of "
                            "(features, labels) batches.", field="input_fn")


def _check_hook_list(owner: str, hooks: Any) -> tuple[Any, ...]:
    hooks = tuple(hooks or ())
    for hook in hooks:
        if not hasattr(hook, "before_run") or not hasattr(hook, "after_run"):
            raise SpecTypeError(f"All hooks must be `SessionRunHook` instances, given: {hook!r}. {owner} `hooks` "
                                "should list tf.compat.v1.train.SessionRunHook objects.", field="hooks")
    return hooks


def _check_listeners(listeners: Any) -> tuple[Any, ...]:
    listeners = tuple(listeners or ())
    for listener in listeners:
        if not hasattr(listener, "after_save"):
            raise SpecTypeError(f"All saving_listeners must be `CheckpointSaverListener` instances, given: "
                                f"{listener!r}. Subclass tf.compat.v1.train.CheckpointSaverListener.",
                                field="saving_listeners")
    return listeners


def _check_positive(owner: str, field: str, value: Any, *, minimum: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecTypeError(f"{owner} `{field}` is {type(value).__name__} {value!r}; expected a number.", field=field)
    if value < minimum:
        relation = "> 0" if minimum == 1 else ">= 0"
        raise SpecError(f"Must specify {field} {relation}, given: {value}. {owner} `{field}` should be {relation}.",
                        field=field)


def _check_exporters(exporters: Any) -> tuple[Any, ...]:
    """TF's rules: an Exporter or an iterable of them, each with a unique, non-empty string name."""
    from toolkit.estimator.exporters import Exporter

    if not exporters:
        return ()
    if isinstance(exporters, Exporter):
        exporters = [exporters]
    try:
        exporters = tuple(exporters)
    except TypeError:
        exporters = (None,)
    if any(not isinstance(e, Exporter) for e in exporters):
        raise SpecTypeError(f"`exporters` must be an Exporter, an iterable of Exporter, or `None`, found "
                            f"{exporters!r:.120}. Pass LatestExporter, BestExporter or FinalExporter objects.",
                            field="exporters")
    names = [e.name for e in exporters]
    for name in names:
        if not name:
            raise SpecError(f"An Exporter cannot have a name that is `None` or empty. All exporter names: {names}.",
                            field="exporters")
        if not isinstance(name, str):
            raise SpecError(f"An Exporter must have a string name. Given: {type(name)}.", field="exporters")
    if len(set(names)) != len(names):
        raise SpecError(f"`exporters` must have unique names. All exporter names: {names}: EvalSpec `exporters` "
                        "have repeated names; give each a unique name.", field="exporters")
    return exporters


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """How ``train_and_evaluate`` trains (``tf.estimator.TrainSpec``).

    Attributes:
        input_fn: returns a Dataset of ``(features, labels)`` (or a tuple of tensors).
        max_steps: the global step at which training stops (None: until the input ends).
        hooks: extra ``SessionRunHook`` objects for training.
        saving_listeners: ``CheckpointSaverListener`` objects called around each checkpoint save.
    """

    input_fn: Callable[..., Any]
    max_steps: int | None = None
    hooks: Sequence[Any] = ()
    saving_listeners: Sequence[Any] = ()

    def __post_init__(self) -> None:
        _check_input_fn("TrainSpec", self.input_fn)
        _check_positive("TrainSpec", "max_steps", self.max_steps)
        object.__setattr__(self, "hooks", _check_hook_list("TrainSpec", self.hooks))
        object.__setattr__(self, "saving_listeners", _check_listeners(self.saving_listeners))


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How ``train_and_evaluate`` evaluates and exports (``tf.estimator.EvalSpec``, TF's defaults).

    Attributes:
        input_fn: evaluation batches.
        steps: evaluation batches per evaluation (None: until the input ends); TF's default 100.
        name: evaluation name (any string without '/'); summaries go to ``model_dir/eval_<name>``.
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
        _check_positive("EvalSpec", "steps", self.steps)
        if self.name is not None and not isinstance(self.name, str):
            raise SpecTypeError(f"`name` must be string, given: {self.name!r}. EvalSpec `name` names the directory "
                                "model_dir/eval_<name>, e.g. 'census-eval'.", field="name")
        check_eval_name(self.name, SpecError, "EvalSpec")
        for field in ("start_delay_secs", "throttle_secs"):
            _check_positive("EvalSpec", field, getattr(self, field), minimum=0)
        object.__setattr__(self, "hooks", _check_hook_list("EvalSpec", self.hooks))
        object.__setattr__(self, "exporters", _check_exporters(self.exporters))
