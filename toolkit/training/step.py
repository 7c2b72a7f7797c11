"""One optimizer step per replica, with loss scaling that is right across replicas.

The step reduces nothing itself: each replica returns the *sums* it saw (number
of examples, summed loss, summed metric values) and the runner adds them over
replicas and steps. Sums of per-example values are exact under every strategy,
including asynchronous parameter servers where Keras 3's stateful metrics are
not (their ``update_state`` is a read-modify-write that loses updates).

The gradient uses ``tf.nn.compute_average_loss`` with the *global* batch size,
so summing gradients over N replicas gives the gradient of the mean loss over
the global batch: N workers take the same step as one process would.

A ``Forward`` is the pluggable part: ``(model, features, labels, training) ->
(per_example_loss, predictions)``. ``make_forward(loss)`` builds one from a Keras
loss; higher layers (e.g. an Estimator-style ``model_fn``) can supply their own.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import keras
import numpy as np
import tensorflow as tf

from toolkit._compat.keras import mean_metric_fn
from toolkit.training.config import TrainingError
from toolkit.training.packing import RemotePacking
from toolkit.training.state import TrainState

if TYPE_CHECKING:
    from strategies.sync_replicas import SyncReplicas

__all__ = ["EvalStep", "Forward", "StatLayout", "SummedMetric", "TrainStep", "after_updates", "make_forward",
           "resolve_metrics"]

#: a batch part (features, labels, predictions): a tensor or any ``tf.nest`` structure of tensors the user's
#: model and loss take; genuinely open, so Any.
Nest = Any
Forward = Callable[[keras.Model, Nest, Nest, bool], "tuple[tf.Tensor, Nest]"]
MetricFn = Callable[[Nest, Nest], tf.Tensor]
#: what ``loss=`` takes: a Keras loss, its name, or a function (y_true, y_pred) -> per-example losses.
LossSpec: TypeAlias = keras.losses.Loss | str | MetricFn


class SummedMetric:
    """A metric whose state is a vector of sums, added over replicas, steps and workers.

    Stateful metrics (AUC, precision, recall, IoU) are exact across workers
    when each step only *contributes* additive counts and the value is computed
    from the totals at the end: ``sums`` returns this batch's ``[width]``
    contribution, ``result`` turns the totals into the metric's value.
    """

    name: str = "summed_metric"
    width: int = 1

    def sums(self, y_true: Nest, y_pred: Nest) -> tf.Tensor:
        raise NotImplementedError

    def result(self, totals: np.ndarray) -> float:
        raise NotImplementedError


#: what ``resolve_metrics`` maps each name to: a per-example function, or a ``SummedMetric``.
ResolvedMetric = MetricFn | SummedMetric


def _per_example(values: tf.Tensor, *, what: str) -> tf.Tensor:
    """Averages trailing dimensions so there is exactly one value per example."""
    values = tf.convert_to_tensor(values)
    if values.shape.rank == 0:
        raise TrainingError(
            f"`{what}` returned a scalar; it must return one value per example (shape [batch]). "
            "Pass a Keras loss object (its reduction is switched off for you) or a function that does not reduce.",
            field=what,
        )
    if values.shape.rank > 1:
        values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
    return tf.cast(values, tf.float32)


def _unreduced_loss(loss: LossSpec | None) -> MetricFn:
    if isinstance(loss, keras.losses.Loss):
        return loss.__class__.from_config({**loss.get_config(), "reduction": None})
    if isinstance(loss, str):
        try:
            fn = keras.losses.get(loss)
        except ValueError as exc:
            raise TrainingError(
                f"`loss` is {loss!r}, which Keras does not know. Pass a name such as "
                "'sparse_categorical_crossentropy' or a keras.losses.Loss.", field="loss") from exc
        return _unreduced_loss(fn) if isinstance(fn, keras.losses.Loss) else fn
    if callable(loss):
        return loss
    raise TrainingError(
        f"`loss` must be a Keras loss, a loss name or a function (y_true, y_pred) -> per-example loss. "
        f"Received: loss={loss!r}.", field="loss")


def make_forward(loss: LossSpec | None) -> Forward:
    """The default forward pass: ``predictions = model(features)``, then the unreduced loss."""
    loss_fn = _unreduced_loss(loss)

    def forward(model: keras.Model, features: Nest, labels: Nest, training: bool) -> tuple[tf.Tensor, Nest]:
        predictions = model(features, training=training)
        return _per_example(loss_fn(labels, predictions), what="loss"), predictions

    return forward


def _accuracy(y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    """Keras' 'accuracy' string: sparse, categorical or binary, chosen from the shapes."""
    y_true, y_pred = tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred)
    if y_pred.shape[-1] == 1:
        return keras.metrics.binary_accuracy(y_true, y_pred)
    if y_true.shape.rank == y_pred.shape.rank and y_true.shape[-1] == y_pred.shape[-1]:
        return keras.metrics.categorical_accuracy(y_true, y_pred)
    return keras.metrics.sparse_categorical_accuracy(y_true, y_pred)


_METRIC_ALIASES: Mapping[str, ResolvedMetric] = {
    "accuracy": _accuracy, "acc": _accuracy,
    "mae": keras.metrics.mean_absolute_error, "mse": keras.metrics.mean_squared_error,
}


def _metric_fn(metric: object) -> tuple[str, ResolvedMetric]:
    if isinstance(metric, str):
        fn = _METRIC_ALIASES.get(metric) or getattr(keras.metrics, metric, None)
        if fn is None or isinstance(fn, type) or not callable(fn):
            raise TrainingError(
                f"`metrics` contains {metric!r}, which is not a per-example Keras metric function. "
                f"Use {', '.join(sorted(_METRIC_ALIASES))}, a keras.metrics function name such as "
                "'sparse_categorical_accuracy', or a function (y_true, y_pred) -> per-example values.",
                field="metrics")
        return metric, fn
    if isinstance(metric, SummedMetric):
        return getattr(metric, "name", type(metric).__name__), metric
    if isinstance(metric, keras.metrics.MeanMetricWrapper):
        # e.g. SparseCategoricalAccuracy(): a mean of its per-example function, which Keras keeps in _fn.
        return metric.name, mean_metric_fn(metric)
    if isinstance(metric, keras.metrics.Metric):
        raise TrainingError(
            f"`metrics` contains the stateful metric {metric.name!r} ({type(metric).__name__}). Only "
            "means of per-example values are exact across asynchronous workers; pass a function "
            "(y_true, y_pred) -> per-example values, or compute it after training.", field="metrics")
    if callable(metric):
        return getattr(metric, "__name__", type(metric).__name__), metric
    raise TrainingError(f"`metrics` entries must be names or functions. Received: {metric!r}.", field="metrics")


def resolve_metrics(metrics: Sequence[object]) -> dict[str, ResolvedMetric]:
    """Maps each metric to ``name -> fn(y_true, y_pred) -> per-example values``."""
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, Sequence):
        raise TrainingError(f"`metrics` must be a list. Received: metrics={metrics!r}. Pass e.g. ['accuracy'].",
                            field="metrics")
    resolved = dict(_metric_fn(m) for m in metrics)
    if "loss" in resolved:
        raise TrainingError("`metrics` may not contain a metric named 'loss'; the loss is always reported.",
                            field="metrics")
    return resolved


@dataclasses.dataclass(frozen=True)
class StatLayout:
    """Which slot of the stats vector holds what: ``[examples, loss_sum, metric_sums...]``.

    A per-example metric takes one slot (its sum, divided by the examples); a
    ``SummedMetric`` named in ``summed`` takes its ``width`` slots and computes
    its value from them.
    """

    metric_names: tuple[str, ...]
    summed: Mapping[str, SummedMetric] = dataclasses.field(default_factory=dict)

    def _width_of(self, name: str) -> int:
        return self.summed[name].width if name in self.summed else 1

    @property
    def width(self) -> int:
        return 2 + sum(self._width_of(name) for name in self.metric_names)

    def to_logs(self, totals: np.ndarray, *, prefix: str = "") -> dict[str, float]:
        count = max(float(totals[0]), 1.0)
        logs = {f"{prefix}loss": float(totals[1]) / count}
        offset = 2
        for name in self.metric_names:
            width = self._width_of(name)
            if name in self.summed:
                logs[f"{prefix}{name}"] = float(self.summed[name].result(np.asarray(totals[offset:offset + width])))
            else:
                logs[f"{prefix}{name}"] = float(totals[offset]) / count
            offset += width
        return logs


class _Step:
    def __init__(self, model: keras.Model, forward: Forward, metrics: Mapping[str, ResolvedMetric]) -> None:
        self.model, self.forward, self.metrics = model, forward, dict(metrics)
        summed = {name: fn for name, fn in self.metrics.items() if isinstance(fn, SummedMetric)}
        self.layout = StatLayout(tuple(self.metrics), summed)

    def _stats(self, labels: Nest, predictions: Nest, per_example: tf.Tensor, extra: tf.Tensor) -> tf.Tensor:
        count = tf.cast(tf.shape(per_example)[0], tf.float32)
        sums = [tf.stack([count, tf.reduce_sum(per_example) + extra * count])]
        for name, fn in self.metrics.items():
            if isinstance(fn, SummedMetric):
                sums.append(tf.reshape(tf.cast(fn.sums(labels, predictions), tf.float32), [fn.width]))
            else:
                sums.append(tf.reshape(tf.reduce_sum(_per_example(fn(labels, predictions), what=f"metrics[{name!r}]")),
                                       [1]))
        return tf.concat(sums, axis=0)


def after_updates(variables: Sequence[keras.Variable | tf.Variable]) -> list[tf.Tensor]:
    """Reads of ``variables`` that run after this function's writes to them.

    Inside a ``tf.function`` ops on *one* resource run in program order, but
    ops on different resources are unordered: without these reads, the global
    step's ``assign_add`` (another variable, maybe on another ps) could run
    before the update it counts. Only a control edge crosses devices, not the
    values.
    """
    reads = []
    for variable in variables:
        inner = variable.value if isinstance(variable, keras.Variable) else variable
        read = getattr(inner, "read_value", None)
        reads.append(read() if callable(read) else tf.convert_to_tensor(inner))
    return reads


class TrainStep(_Step):
    """The per-replica training step (Keras' ``one_step``): forward, scaled loss, gradients, update.

    Returns the replica's stats vector (see ``StatLayout``). The reported loss
    includes the model's regularization losses, like Keras' ``fit``. The
    runner wraps it into executions of several steps (Keras' ``multi_step``)
    and counts finished steps in the global step.

    It is the engine's seam: a new kind of update subclasses it and overrides

    * ``variables()``: what to differentiate (default: the model's trainable variables);
    * ``tape_scope()``: a context entered around the forward pass;
    * ``apply(gradients, variables, *, step)``: the update; returns tensors that exist
      only once the update is done (the global step is counted after them);
    * ``counts_steps``: False when ``apply`` advances the global step itself.

    ``toolkit.layers.ShardedTrainStep`` (sharded embedding tables) plugs in this
    way; pass such a class as ``FitOptions(train_step=...)``.

    With ``sync`` (a ``strategies.sync_replicas.SyncReplicas``) the step is one
    *contribution*: it reads the global step before the forward pass, so the
    gradients can be dropped if an update lands meanwhile, and hands them to
    ``sync`` instead of the optimizer. Its stats still count, because the
    loss was really computed on those examples.
    """

    #: under parameter servers, fetch the variables and send the gradients as one tensor per ps
    #: (``toolkit.training.packing``); a subclass whose forward pass needs the variables themselves
    #: (not their values) sets it False.
    pack_transfers: bool = True

    def __init__(self, state: TrainState, forward: Forward, metrics: Mapping[str, ResolvedMetric], *,
                 global_batch_size: int | None = None, sync: SyncReplicas | None = None) -> None:
        super().__init__(state.model, forward, metrics)
        self.state = state
        self.optimizer, self.global_batch_size, self.sync = state.optimizer, global_batch_size, sync

    @property
    def counts_steps(self) -> bool:
        """True when the runner adds finished steps to the global step (False: ``apply`` does)."""
        return self.sync is None

    def variables(self) -> list[keras.Variable]:
        """The variables the step differentiates and updates."""
        return list(self.model.trainable_variables)

    def tape_scope(self) -> contextlib.AbstractContextManager[object]:
        """A context entered around the forward pass and the tape."""
        return contextlib.nullcontext()

    def scaled_loss(self, per_example: tf.Tensor, regularization: tf.Tensor) -> tf.Tensor:
        """The loss whose gradients, summed over replicas, are those of the global batch's mean.

        Times the optimizer's loss scale, as Keras' own step does: a ``LossScaleOptimizer``
        scales the loss here and unscales the gradients in ``apply_gradients``
        (``scale_loss`` is the identity for every other optimizer).
        """
        global_batch = self.global_batch_size
        if global_batch is None:  # this replica's batch times the replicas (1 outside strategy.run)
            context = tf.distribute.get_replica_context()
            replicas = context.num_replicas_in_sync if context is not None else 1
            global_batch = tf.shape(per_example)[0] * replicas
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        return self.optimizer.scale_loss(loss + tf.nn.scale_regularization_loss(regularization))

    def apply(self, gradients: Sequence[tf.Tensor | None], variables: Sequence[keras.Variable], *,
              step: tf.Tensor | None = None) -> list[tf.Tensor]:
        """Applies ``gradients``; returns tensors that depend on the finished update.

        ``step`` is the global step read before the forward pass (only with ``sync``).
        """
        if self.sync is not None:
            return [self.sync.apply_gradients(zip(gradients, variables, strict=False), step)]
        self.optimizer.apply_gradients(zip(gradients, variables, strict=False))
        return after_updates(variables)

    def __call__(self, features: Nest, labels: Nest) -> tf.Tensor:
        model = self.model
        read_step = [] if self.sync is None else [self.sync.read_step()]
        variables = self.variables()
        packing = RemotePacking.of(variables) if self.pack_transfers else None
        if packing is not None:
            return self._packed_call(packing, features, labels, read_step)
        with tf.control_dependencies(read_step), self.tape_scope(), tf.GradientTape() as tape:
            per_example, predictions = self.forward(model, features, labels, True)
            regularization = tf.add_n([tf.constant(0.0), *model.losses])
            loss = self.scaled_loss(per_example, regularization)
        gradients = tape.gradient(loss, variables)
        done = self.apply(gradients, variables, step=read_step[0] if read_step else None)
        with tf.control_dependencies(done):
            return tf.identity(self._stats(labels, predictions, per_example, regularization))

    def _packed_call(self, packing: RemotePacking, features: Any, labels: Any, read_step: list[Any]) -> tf.Tensor:
        """``__call__`` with the variables fetched and the gradients sent as one tensor per ps."""
        model = self.model
        with tf.control_dependencies(read_step):
            values = packing.fetch()
        with self.tape_scope(), tf.GradientTape() as tape, packing.scope(values) as scope:
            tape.watch(values)
            per_example, predictions = self.forward(model, features, labels, True)
            regularization = tf.add_n([tf.constant(0.0), *model.losses])
            loss = self.scaled_loss(per_example, regularization)
        written = RemotePacking.write_back(scope, model)
        gradients = packing.ship(tape.gradient(loss, values))
        with tf.control_dependencies(written):
            done = self.apply(gradients, packing.variables, step=read_step[0] if read_step else None)
        with tf.control_dependencies(done):
            return tf.identity(self._stats(labels, predictions, per_example, regularization))


class EvalStep(_Step):
    """Forward pass only, in inference mode; same stats vector as ``TrainStep``."""

    def __call__(self, features: Nest, labels: Nest) -> tf.Tensor:
        per_example, predictions = self.forward(self.model, features, labels, False)
        regularization = tf.add_n([tf.constant(0.0), *self.model.losses])
        return self._stats(labels, predictions, per_example, regularization)
