"""``model.fit``/``evaluate``/``predict`` of a model compiled under a multi-worker strategy.

They run on the engine behind ``toolkit.fit`` (``toolkit.training``): the same
``TrainStep``, runners and ``run_loop``, with Keras' arguments translated
(``_compile``, ``_inputs``, ``_callbacks``). The model's optimizer, global step
and slots are built once per compiled model, so a second ``fit`` continues
from the first. Evaluation and prediction run in the calling process over the
whole data (a parameter-server coordinator reads the variables from the
servers), so the numbers are exact and need no collective.
"""
from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tf_config.checks import check_int
from toolkit.keras_dist._callbacks import split_callbacks
from toolkit.keras_dist._inputs import (
    KerasData,
    evaluation_input,
    prediction_batches,
    training_input,
)
from toolkit.keras_dist._ship import named_for, prepare, shipped_runner
from toolkit.training import (
    CheckpointConfig,
    FitConfig,
    LoopRecord,
    TrainingError,
    TrainState,
    ValidationConfig,
    Validator,
    build_state,
    engine,
)
from toolkit.training.compiled import CompileRecord
from toolkit.training.engine import EngineRun, task_of
from toolkit.training.step import Nest

__all__ = ["distributed_fit", "distributed_evaluate", "distributed_predict"]

logger = logging.getLogger(__name__)

_states: weakref.WeakKeyDictionary[keras.Model, TrainState] = weakref.WeakKeyDictionary()


def forget(model: keras.Model) -> None:
    """A recompiled model starts with a fresh optimizer, as in Keras."""
    _states.pop(model, None)


def _build_on_first_batch(model: keras.Model, record: CompileRecord, element_spec: Nest) -> None:
    """Builds a model without ``keras.Input`` from the shape of a batch, as Keras does on its first batch.

    The variables are created here, inside the strategy's scope (so on the ps,
    or mirrored), never inside a training step where the strategy cannot place
    them. One example of zeros is enough to build every layer.
    """
    if model.built and model.weights:
        return
    features = element_spec[0] if isinstance(element_spec, tuple) else element_spec
    if features is None:
        raise TrainingError(
            f"Model {model.name!r} has no weights yet and fit could not see the shape of its input. Give it a "
            "keras.Input(shape=...) first layer, or call model.build(input_shape) inside strategy.scope().",
            field="model")
    example = tf.nest.map_structure(lambda spec: tf.zeros([1 if d is None else d for d in [1, *spec.shape[1:]]],
                                                          spec.dtype), features)
    assert record.strategy is not None  # model.compile ran under a multi-worker strategy
    with record.strategy.scope():
        model(example, training=False)
    logger.info("model %r built on the first batch's shape: %s", model.name,
                tf.nest.map_structure(lambda spec: spec.shape, features))


def _state(model: keras.Model, record: CompileRecord) -> TrainState:
    state = _states.get(model)
    if state is None:
        if not model.built or not model.weights:
            raise TrainingError(
                f"Model {model.name!r} has no weights yet, so its variables would be created inside the training "
                "step, where the strategy cannot place them. Give it a keras.Input(shape=...) first layer, or call "
                "model.build(input_shape) inside strategy.scope() before fit.", field="model")
        state = build_state(record.strategy, lambda: model, record.optimizer)
        _states[model] = state  # build_state also sets model.optimizer, which Keras callbacks change
    return state


def _verbose(verbose: int | str) -> int:
    return 1 if verbose == "auto" else int(verbose)


def _history(model: keras.Model, loop: LoopRecord, *, verbose: int, epochs: int, steps: int) -> keras.callbacks.History:
    history = keras.callbacks.History()
    history.set_model(model)
    history.set_params({"verbose": verbose, "epochs": epochs, "steps": steps})
    history.epoch = list(loop.epochs)
    history.history = {name: list(values) for name, values in loop.history.items()}
    model.history = history  # as Keras' fit leaves it
    return history


def distributed_fit(model: keras.Model, record: CompileRecord, x: KerasData = None, y: KerasData = None,
                    batch_size: int | None = None, epochs: int = 1, verbose: int | str = "auto",
                    callbacks: Sequence[keras.callbacks.Callback] | None = None,
                    validation_split: float = 0.0, validation_data: KerasData = None, shuffle: bool = True,
                    class_weight: Mapping[int, float] | None = None, sample_weight: KerasData = None,
                    initial_epoch: int = 0,
                    steps_per_epoch: int | None = None, validation_steps: int | None = None,
                    validation_batch_size: int | None = None, validation_freq: int = 1) -> keras.callbacks.History:
    """``model.fit`` with Keras' arguments, on the engine (see the module docstring)."""
    strategy = record.strategy
    task = task_of(strategy)
    if validation_split:
        raise TrainingError(
            f"`validation_split` is {validation_split!r}, which Keras only supports for arrays in one process. "
            "Pass validation_data=(x_val, y_val) (or a dataset) instead.", field="validation_split")
    check_int(validation_freq, field="validation_freq", error=TrainingError)
    data = training_input(x, y, sample_weight=sample_weight, class_weight=class_weight, batch_size=batch_size,
                          shuffle=shuffle, steps_per_epoch=steps_per_epoch, epochs=epochs,
                          initial_epoch=initial_epoch, kind=task.kind, workers=task.workers)
    run_callbacks, backup = split_callbacks(callbacks, is_chief=task.is_chief)
    checkpoint = CheckpointConfig(every=backup.every(data.steps_per_epoch), keep=1) if backup else CheckpointConfig()
    config = FitConfig(epochs=epochs, steps_per_epoch=data.steps_per_epoch,
                       steps_per_execution=record.steps_per_execution, checkpoint=checkpoint,
                       validation=ValidationConfig(steps=validation_steps))
    _build_on_first_batch(model, record, data.element_spec)
    named = named_for(model) if task.kind == "parameter_server" else None
    shipped = named is not None and prepare(model, record, workers=task.workers,
                                            from_dataset=isinstance(x, tf.data.Dataset))
    # outside the strategy's scope, so that its creator picks the ps first: workers open what is named
    with tf.variable_creator_scope(named) if named is not None else contextlib.nullcontext():
        state = _state(model, record)
        step = engine.build_step(state, strategy, record.forward(), record.metrics, config=config)
    validation = None if validation_data is None else evaluation_input(
        validation_data, batch_size=validation_batch_size or batch_size, steps=validation_steps)
    verbose = _verbose(verbose)
    run = EngineRun(config=config, task=task, dataset_fn=data.source, forward=record.forward(),
                    metrics=record.metrics, checkpoint_dir=backup.directory if backup else None,
                    restore_field="BackupAndRestore.backup_dir", first_step=initial_epoch * config.steps_per_epoch,
                    callbacks=run_callbacks, verbose=verbose, validation_data=validation,
                    validation_freq=validation_freq)
    runner = shipped_runner(model, record, state, step, dataset_fn=data.source, workers=task.workers) \
        if shipped else None
    loop = engine.train(run, state, step, strategy, runner=runner).record
    if backup is not None and backup.delete_checkpoint and task.is_chief and tf.io.gfile.exists(backup.directory):
        tf.io.gfile.rmtree(backup.directory)  # Keras deletes the backup after a run that ended normally
    return _history(model, loop, verbose=verbose, epochs=epochs, steps=config.steps_per_epoch)


def _evaluation_data(x: KerasData, y: KerasData, sample_weight: KerasData) -> KerasData:
    if isinstance(x, tf.data.Dataset) or callable(x):
        return x
    return (x, y) if sample_weight is None else (x, y, sample_weight)


def distributed_evaluate(model: keras.Model, record: CompileRecord, x: KerasData = None, y: KerasData = None,
                         batch_size: int | None = None, verbose: int | str = "auto", sample_weight: KerasData = None,
                         steps: int | None = None, callbacks: Sequence[keras.callbacks.Callback] | None = None,
                         return_dict: bool = False, **kwargs: Any) -> float | list[float] | dict[str, float]:
    """``model.evaluate``: the loss and metrics over the whole data, computed in this process."""
    data = evaluation_input(_evaluation_data(x, y, sample_weight), batch_size=batch_size, steps=steps, where="x")
    logs = Validator(model, data, forward=record.forward(), metrics=record.metrics, steps=steps, prefix="")()
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def distributed_predict(model: keras.Model, record: CompileRecord, x: KerasData, batch_size: int | None = None,
                        verbose: int | str = "auto", steps: int | None = None,
                        callbacks: Sequence[keras.callbacks.Callback] | None = None) -> Nest:
    """``model.predict``: the model's outputs for every batch, concatenated (computed in this process)."""
    call = tf.function(lambda features: model(features, training=False))
    outputs = [tf.nest.map_structure(np.asarray, call(batch))
               for batch in prediction_batches(x, batch_size=batch_size, steps=steps)]
    if not outputs:
        raise TrainingError("`x` produced no batches, so there is nothing to predict.", field="x")
    return tf.nest.map_structure(lambda *parts: np.concatenate(parts, axis=0), *outputs)
