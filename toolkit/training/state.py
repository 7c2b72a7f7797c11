"""What training mutates: the model, the optimizer, and a reliable global step.

``TrainState`` is built under the strategy's scope so that every variable lands
where the strategy wants it (mirrored on each replica, or on a parameter
server). The global step is a plain ``tf.Variable`` incremented with
``assign_add``: on a parameter server that is one atomic op, whereas Keras 3's
``optimizer.iterations`` is updated as ``assign(self + 1)`` and loses increments
when workers race. Learning-rate schedules are therefore re-bound to the global step.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any, TypeAlias

import keras
import tensorflow as tf

from toolkit._compat.keras import compile_arguments
from toolkit.training.config import TrainingError

__all__ = ["GlobalStepSchedule", "TracedWriteCheckpoint", "TrainState", "build_state", "compiled_arguments",
           "seed_states"]

logger = logging.getLogger(__name__)

#: what ``optimizer=`` takes: a Keras optimizer, its name, or a zero-argument callable returning one.
OptimizerSpec: TypeAlias = keras.optimizers.Optimizer | str | Callable[[], keras.optimizers.Optimizer]


class GlobalStepSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A Keras schedule evaluated at the global step instead of ``optimizer.iterations``."""

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, global_step: tf.Variable) -> None:
        self.schedule = schedule
        self.global_step = global_step

    def __call__(self, step: int | tf.Tensor) -> tf.Tensor:  # Keras passes its own step; ignored
        return self.schedule(tf.cast(self.global_step, tf.float32))

    def get_config(self) -> dict:
        return {"schedule": keras.optimizers.schedules.serialize(self.schedule)}


class _Traced:
    """The traced write and the objects it was traced for (a plain object: a checkpoint tracks no dependency on it)."""

    def __init__(self) -> None:
        self.key: tuple[object, ...] | None = None  # (object ids, io device, skip slots, sharding callback id)
        self.write: Callable[[tf.Tensor], tf.Tensor] | None = None
        self.traces = 0


class TracedWriteCheckpoint(tf.train.Checkpoint):
    """A ``tf.train.Checkpoint`` whose writes run one traced function, re-traced when its objects or options change.

    TensorFlow 2.21 writes a checkpoint whose tensors sit on more than one task
    (a parameter-server model, saved from the chief) by tracing a new function
    on every write, after reading every variable eagerly, and every task that
    holds variables instantiates that graph again. Written from inside one ``tf.function``, the
    same save ops read the variables when the function runs, so later writes
    save the values of that moment. The function is traced again when the
    checkpoint's objects change (e.g. a variable created after the first
    save) or the write options do, so nothing is left out of a checkpoint. Bookkeeping
    (``tf.train.CheckpointManager``'s numbering, pruning and ``checkpoint``
    index) is unchanged: the manager's write callbacks run after the write.
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._traced = _Traced()

    @property
    def traces(self) -> int:
        """How many times the write function has been traced."""
        return self._traced.traces

    def _write(self, file_prefix: str, options: tf.train.CheckpointOptions | None = None) -> str:
        if not tf.executing_eagerly() or (options is not None and options.experimental_enable_async_checkpoint):
            return super()._write(file_prefix, options=options)
        callbacks = list(options.experimental_write_callbacks or ()) if options is not None else []
        inner = copy.copy(options) if options is not None else tf.train.CheckpointOptions()
        inner.experimental_write_callbacks = None  # run below, with the path as a string
        # What the traced write depends on: the objects (each one captured, so kept alive, by the function
        # traced for them) and the options it was traced with, other than the callbacks run below.
        objects = tuple(id(obj) for obj in tf.train.TrackableView(self).descendants())
        key = (objects, inner.experimental_io_device, inner.experimental_skip_slot_variables,
               id(inner.experimental_sharding_callback))
        traced = self._traced
        if traced.write is None or traced.key != key:
            # TensorFlow's own saving code: nothing for autograph to convert.
            traced.write = tf.function(lambda prefix: super(TracedWriteCheckpoint, self)._write(prefix, options=inner),
                                       autograph=False)
            traced.key = key
            traced.traces += 1
            logger.info("tracing the checkpoint write (%d objects, trace %d)", len(objects), traced.traces)
        # TensorFlow creates the directory when the prefix is a string, not when it is a tensor.
        tf.io.gfile.makedirs(os.path.dirname(file_prefix) or ".")
        path = traced.write(tf.constant(file_prefix)).numpy().decode()
        for callback in callbacks:
            callback(path)
        return path


@dataclasses.dataclass
class TrainState:
    """The variables one training run owns.

    Attributes:
        model: the Keras 3 model, built under the strategy's scope.
        optimizer: a Keras 3 optimizer whose slots are already built.
        global_step: int64 count of optimizer steps taken by all workers.
        extras: further trackables to checkpoint, by name (added by train steps).
        traced_writes: whether checkpoints write through one traced function
            (``TracedWriteCheckpoint``): under parameter servers, where the
            variables are on other tasks than the chief that saves them.
    """

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    global_step: tf.Variable
    extras: dict[str, tf.train.Checkpoint | tf.Variable | tf.Module] = dataclasses.field(default_factory=dict)
    traced_writes: bool = False

    def checkpoint(self) -> tf.train.Checkpoint:
        """Everything a restart needs to continue exactly where it stopped.

        Besides model, optimizer and global step: the state of the model's
        seed generators (``rng``; Keras does not checkpoint them, so a resumed
        run would draw other dropout masks than the uninterrupted one), and
        ``extras``, what a train step adds (e.g. a sparse optimizer's slots).
        """
        kind = TracedWriteCheckpoint if self.traced_writes else tf.train.Checkpoint
        return kind(model=self.model, optimizer=self.optimizer, global_step=self.global_step,
                    rng=seed_states(self.model), **self.extras)

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())


def seed_states(model: keras.Model) -> list[keras.Variable]:
    """The state variables of the model's ``keras.random.SeedGenerator``\ s (dropout, noise layers), in order."""
    return [v for v in model.non_trainable_variables if v.name == "seed_generator_state"]


def _fresh_optimizer(spec: OptimizerSpec) -> keras.optimizers.Optimizer:
    """A new optimizer, created now so its variables follow the current strategy scope."""
    if isinstance(spec, keras.optimizers.Optimizer):
        # Re-create from config: the instance's variables were made outside the scope.
        return spec.__class__.from_config(spec.get_config())
    if isinstance(spec, str):
        try:
            return keras.optimizers.get(spec)
        except ValueError as exc:
            raise TrainingError(
                f"`optimizer` is {spec!r}, which Keras does not know. Pass a name such as 'adam' or 'sgd', "
                "or a keras.optimizers.Optimizer.",
                field="optimizer",
            ) from exc
    if callable(spec):
        optimizer = spec()
        if isinstance(optimizer, keras.optimizers.Optimizer):
            return optimizer
        raise TrainingError(
            f"`optimizer` is a callable that returned {type(optimizer).__name__}; it must return a "
            "keras.optimizers.Optimizer.",
            field="optimizer",
        )
    raise TrainingError(
        f"`optimizer` must be a name, a keras.optimizers.Optimizer or a callable returning one. "
        f"Received: optimizer={spec!r}.",
        field="optimizer",
    )


def _bind_schedule(optimizer: keras.optimizers.Optimizer, global_step: tf.Variable) -> None:
    serialized = optimizer.get_config().get("learning_rate")  # absent for a LossScaleOptimizer (a wrapper)
    if not isinstance(serialized, dict):
        return
    schedule = keras.optimizers.schedules.deserialize(serialized)
    optimizer.learning_rate = GlobalStepSchedule(schedule, global_step)
    logger.debug("learning-rate schedule %s now follows the global step", type(schedule).__name__)


def compiled_arguments(model: keras.Model) -> dict[str, Any]:
    """The arguments ``model.compile`` was given (``toolkit.training.compiled`` reads them)."""
    arguments = compile_arguments(model)
    if arguments is None:
        raise TrainingError(
            f"`model_fn` returned model {model.name!r}, which is not compiled. Compile it inside model_fn, as for "
            "Keras' model.fit: model.compile(optimizer='adam', loss=keras.losses.SparseCategoricalCrossentropy("
            "from_logits=True), metrics=['accuracy']).", field="model_fn")
    return arguments


def _check_model(model: object) -> keras.Model:
    if not isinstance(model, keras.Model):
        raise TrainingError(
            f"`model_fn` must return a keras.Model. Received: {type(model).__name__}. "
            "Return e.g. models.digits_mlp().",
            field="model_fn",
        )
    if not model.built or not model.trainable_variables:
        raise TrainingError(
            f"`model_fn` returned model {model.name!r} with no built trainable weights. Give it a "
            "keras.Input (functional or Sequential) or call model.build(input_shape) inside model_fn.",
            field="model_fn",
        )
    return model


def build_state(strategy: tf.distribute.Strategy, model_fn: Callable[[], keras.Model],
                optimizer: OptimizerSpec | None = None) -> TrainState:
    """Builds model, optimizer (with slots) and global step under ``strategy.scope()``.

    ``optimizer`` None: the one ``model_fn`` compiled its model with.

    Example:
        >>> from models import digits_mlp
        >>> state = build_state(tf.distribute.get_strategy(), digits_mlp, "adam")
        >>> int(state.global_step.numpy()), type(state.optimizer).__name__
        (0, 'Adam')
    """
    with strategy.scope():
        model = _check_model(model_fn())
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        if optimizer is None:
            optimizer = compiled_arguments(model).get("optimizer") or "rmsprop"  # Keras' default
        opt = _fresh_optimizer(optimizer)
        _bind_schedule(opt, global_step)
        opt.build(model.trainable_variables)
    # Keras callbacks (ReduceLROnPlateau, LearningRateScheduler, ...) reach the optimizer through the model.
    model.optimizer = opt
    return TrainState(model=model, optimizer=opt, global_step=global_step,
                      traced_writes=isinstance(strategy, tf.distribute.ParameterServerStrategy))
