"""Synchronous parameter-server training: TF1's SyncReplicasOptimizer, rebuilt for TF 2.

TensorFlow 2 dropped ``SyncReplicasOptimizer``, so ParameterServerStrategy is
asynchronous only: every worker's gradients are applied the moment they arrive.
``SyncReplicas`` restores the synchronous mode. Next to each trainable variable
(on its parameter server) it keeps an accumulator, plus three int64 counters
beside the global step: contributions received for the current step, updates
applied, and stale contributions dropped. A worker's contribution is::

    g = global_step                     # read before the forward pass
    grads = gradients of the loss       # on the variables as of step g
    with critical_section:              # one mutex, on a parameter server
        if g == global_step:            # still the current step
            accumulators += grads; count += 1
            if count == replicas_to_aggregate:
                apply(accumulators / replicas_to_aggregate); zero them; count = 0
                global_step += 1
        else:
            stale += 1                  # computed on old weights: dropped

The critical section really is exclusive across closures running concurrently
on different workers. Contributions are counted, not
attributed to workers, exactly like TF1: with only one worker alive,
``replicas_to_aggregate=2`` still makes progress, one global step per two of
that worker's steps.

The averaged update goes through the optimizer's ``update_step`` (Keras'
``apply_gradients`` all-reduces through ``merge_call``, which TensorFlow
forbids inside the lock's control flow). What ``apply`` would add is done
here too: gradients are divided by the optimizer's ``loss_scale_factor`` and
variable constraints are applied after the update. Optimizers with clipping,
weight decay, EMA or Keras-side gradient accumulation are rejected.

Example:
    >>> with strategy.scope():                                 # doctest: +SKIP
    ...     sync = SyncReplicas(optimizer, model.trainable_variables, replicas_to_aggregate=2)
    >>> @tf.function  # doctest: +SKIP
    ... def step(x, y):
    ...     return sync.minimize(lambda: loss_fn(model(x), y))
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from strategies._errors import StrategyError
from tf_config.checks import check_int

if TYPE_CHECKING:  # TensorFlow and Keras are imported where they are used
    import keras
    import tensorflow as tf

logger = logging.getLogger(__name__)

__all__ = ["SyncReplicas", "check_replicas_to_aggregate"]


def check_replicas_to_aggregate(value: object) -> int:
    """Validates ``replicas_to_aggregate``; returns it.

    Raises:
        StrategyError: not a positive int.
    """
    return cast(int, check_int(value, field="replicas_to_aggregate", error=StrategyError,
                               what="gradients averaged per update",
                               fix="Pass the number of workers, e.g. replicas_to_aggregate=2."))


def _colocated(variable: keras.Variable | tf.Variable) -> contextlib.AbstractContextManager[None]:
    """A scope creating variables next to ``variable`` (same ps), under any strategy."""
    import tensorflow as tf

    return tf.distribute.get_strategy().extended.colocate_vars_with(_tf_variable(variable))


def _tf_variable(variable: keras.Variable | tf.Variable) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 variable (or the variable itself)."""
    import keras

    return variable.value if isinstance(variable, keras.Variable) else variable


class SyncReplicas:
    """Aggregates ``replicas_to_aggregate`` gradient contributions per update, on the ps.

    Build it under ``strategy.scope()`` after the model and optimizer, so the
    accumulators are placed with their variables. Call ``minimize`` (or
    ``read_step`` + ``apply_gradients``) inside the function each worker runs.

    Attributes:
        replicas_to_aggregate: contributions averaged into one update.
        global_step: int64 updates applied (the TF1 global step).
        stale: int64 contributions dropped because the step moved on.
        pending: int64 contributions accumulated for the current step.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer, variables: Sequence[keras.Variable | tf.Variable], *,
                 replicas_to_aggregate: int, global_step: tf.Variable | None = None,
                 name: str = "sync_replicas") -> None:
        import tensorflow as tf

        self.replicas_to_aggregate = check_replicas_to_aggregate(replicas_to_aggregate)
        self.optimizer = optimizer
        self.variables = list(variables)
        if not self.variables:
            raise StrategyError("SyncReplicas received no variables; pass model.trainable_variables.",
                field="variables")
        _check_optimizer(optimizer)
        if not getattr(optimizer, "built", True):
            optimizer.build(self.variables)
        if global_step is None:
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.global_step = global_step
        with _colocated(global_step):
            self.pending = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{name}/pending")
            self.stale = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{name}/stale")
        self._accumulators = []
        for variable in self.variables:
            with _colocated(variable):
                self._accumulators.append(tf.Variable(
                    tf.zeros(variable.shape, variable.dtype), trainable=False,
                    name=f"{name}/{variable.name.split(':')[0]}/accumulator"))
        with tf.device(_tf_variable(global_step).device):
            self._lock = tf.CriticalSection(name=f"{name}_lock")
        logger.info("synchronous updates: %d contribution(s) per step; lock on %s",
                    self.replicas_to_aggregate, global_step.device or "the local device")

    @property
    def accumulators(self) -> list[tf.Variable]:
        return list(self._accumulators)

    def read_step(self) -> tf.Tensor:
        """The global step a contribution is computed at; read it before the forward pass."""
        return self.global_step.read_value()

    def apply_gradients(self, grads_and_vars: Iterable[tuple[tf.Tensor | None, keras.Variable | tf.Variable]],
                        step: tf.Tensor) -> tf.Tensor:
        """Contributes gradients computed at global step ``step``.

        Returns:
            A bool tensor: True if the contribution was accepted (fresh),
            False if it was stale and dropped.
        """
        import tensorflow as tf

        grads_and_vars = list(grads_and_vars)
        if [id(v) for _, v in grads_and_vars] != [id(v) for v in self.variables]:
            raise StrategyError(
                "SyncReplicas.apply_gradients received variables that differ from those it was built "
                "with; pass gradients for exactly `variables`, in the same order.", field="grads_and_vars"
            )
        grads = [_dense(g, v) for g, v in grads_and_vars]
        context = tf.distribute.get_replica_context()
        if context is None:
            return self._contribute(grads, step)
        # Sum this worker's replicas first, then leave replica context: Keras optimizers
        # all-reduce through merge_call, which is not allowed inside the lock's control flow.
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        return context.merge_call(_first_local(self._contribute), args=(grads, step))

    def _contribute(self, grads: list[tf.Tensor], step: tf.Tensor) -> tf.Tensor:
        import tensorflow as tf

        return self._lock.execute(lambda: tf.cond(
            tf.equal(step, self.global_step.read_value()),
            lambda: self._accept(grads), self._drop))

    def minimize(self, loss_fn: Callable[[], tf.Tensor]) -> tf.Tensor:
        """Reads the step, computes ``loss_fn()`` and its gradients, contributes them; returns the loss."""
        import tensorflow as tf

        step = self.read_step()
        with tf.control_dependencies([step]), tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, self.variables)
        accepted = self.apply_gradients(zip(grads, self.variables, strict=False), step)
        with tf.control_dependencies([accepted]):
            return tf.identity(loss)

    def _accept(self, grads: list[tf.Tensor]) -> tf.Tensor:
        import tensorflow as tf

        adds = [acc.assign_add(g) for acc, g in zip(self._accumulators, grads, strict=False)]
        with tf.control_dependencies(adds):
            count = self.pending.assign_add(1)
        return tf.cond(count >= self.replicas_to_aggregate, self._update, lambda: tf.constant(True))

    def _update(self) -> tf.Tensor:
        import tensorflow as tf

        scale = 1.0 / self.replicas_to_aggregate
        if self.optimizer.loss_scale_factor is not None:  # gradients of a scaled loss: unscale, as apply() does
            scale /= float(self.optimizer.loss_scale_factor)
        averaged = [acc.read_value() * tf.cast(scale, acc.dtype) for acc in self._accumulators]
        learning_rate = self.optimizer.learning_rate
        for gradient, variable in zip(averaged, self.variables, strict=False):
            self.optimizer.update_step(gradient, variable, learning_rate)
        self.optimizer.iterations.assign_add(1)
        for variable in self.variables:  # constraints after the update, as Keras' apply() does
            constraint = getattr(variable, "constraint", None)
            if constraint is not None:
                variable.assign(constraint(variable))
        with tf.control_dependencies(averaged + [tf.convert_to_tensor(v) for v in self.variables]):
            resets = [acc.assign(tf.zeros_like(acc)) for acc in self._accumulators]
            resets.append(self.pending.assign(0))
        with tf.control_dependencies(resets):
            self.global_step.assign_add(1)
        with tf.control_dependencies(resets):
            return tf.constant(True)

    def _drop(self) -> tf.Tensor:
        import tensorflow as tf

        with tf.control_dependencies([self.stale.assign_add(1)]):
            return tf.constant(False)


# Optimizer options applied by Keras' own apply path, which cannot run under the lock.
_UNSUPPORTED_OPTIONS = ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay", "use_ema",
                        "gradient_accumulation_steps")


def _check_optimizer(optimizer: object) -> None:
    if not callable(getattr(optimizer, "update_step", None)):
        raise StrategyError(
            f"SyncReplicas needs a Keras 3 optimizer; received {type(optimizer).__name__}. "
            "Pass e.g. keras.optimizers.Adam(0.001).", field="optimizer"
        )
    for option in _UNSUPPORTED_OPTIONS:
        value = getattr(optimizer, option, None)
        if value:
            raise StrategyError(
                f"SyncReplicas applies the averaged update with `update_step`, which skips Keras' "
                f"`{option}` (received {option}={value!r}). Create the optimizer without `{option}` "
                "(clip the gradients yourself before contributing them), or train asynchronously.",
                field=f"optimizer.{option}"
            )


def _first_local(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapts ``fn`` for ``merge_call``: one local copy of each (already all-reduced) value."""

    def merged(strategy: tf.distribute.Strategy, grads: list[Any], step: Any) -> Any:  # per-replica values
        def first(value: Any) -> tf.Tensor:
            return strategy.experimental_local_results(value)[0]

        return fn([first(g) for g in grads], first(step))

    return merged


def _dense(gradient: tf.Tensor | tf.IndexedSlices | None, variable: tf.Variable) -> tf.Tensor:
    import tensorflow as tf

    if gradient is None:
        raise StrategyError(
            f"SyncReplicas received no gradient for variable {variable.name!r}; every variable it "
            "aggregates must take part in the loss. Leave unused variables out of `variables`.", field="grads_and_vars"
        )
    return tf.convert_to_tensor(gradient)
