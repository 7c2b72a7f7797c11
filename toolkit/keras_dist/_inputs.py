"""What ``model.fit``/``evaluate``/``predict`` accept, as the engine's inputs.

Training input becomes either a ``tf.data.Dataset`` of global batches (under
MultiWorkerMirrored: TensorFlow shards it per worker, honouring its
``auto_shard_policy``, exactly as Keras would) or a ``dataset_fn(input_context)``
(the parameter-server tutorial's pattern, and NumPy arrays). Under parameter
servers a ``tf.data.Dataset`` becomes a ``dataset_fn`` too: the dataset's graph
is serialized once on the chief and rebuilt on every worker (what
``ClusterCoordinator.create_per_worker_dataset`` does with a dataset), where
worker *i* of *n* takes every *n*-th batch of it, starting at the *i*-th. Every element
with a sample weight (third element, ``sample_weight=`` or ``class_weight=``)
becomes ``(features, (labels, weights))``: the weight travels with the labels
to the loss and the weighted metrics. Input without weights is not touched, so
it costs exactly what it costs ``toolkit.fit``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import tensorflow as tf

from toolkit.training import TrainingError
from toolkit.training.step import Nest

#: what Keras' ``fit(x=...)`` takes: arrays or tensors (or dicts and lists of them), a ``tf.data.Dataset``,
#: a ``dataset_fn(input_context)``...; the functions below sort it out at run time, so it stays open.
KerasData = Any

__all__ = ["TrainInput", "training_input", "evaluation_input", "prediction_batches"]

_INFINITE = int(tf.data.INFINITE_CARDINALITY)
_UNKNOWN = int(tf.data.UNKNOWN_CARDINALITY)


@dataclasses.dataclass(frozen=True)
class TrainInput:
    """The engine's training source and how many steps make an epoch."""

    source: tf.data.Dataset | Callable[[tf.distribute.InputContext], tf.data.Dataset]
    steps_per_epoch: int
    element_spec: Nest = None  # the (features, labels, ...) spec of a batch, to build a model on it


def _class_weights(class_weight: Mapping[Any, float] | None) -> tf.Tensor | None:
    if class_weight is None:
        return None
    if not isinstance(class_weight, Mapping) or not all(isinstance(k, (int, np.integer)) and k >= 0
                                                        for k in class_weight):
        raise TrainingError(f"`class_weight` must map class indices to weights. Received: class_weight="
                            f"{class_weight!r}. Pass e.g. class_weight={{0: 1.0, 1: 5.0}}.", field="class_weight")
    table = np.ones([max(int(k) for k in class_weight) + 1], np.float32)
    for key, weight in class_weight.items():
        table[int(key)] = weight
    return tf.constant(table)


def _check_element(spec: Nest, where: str) -> None:
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise TrainingError(
            f"`{where}` must yield (x, y) or (x, y, sample_weight) batches; its elements are {spec!r}. "
            "Map it with `.map(lambda example: (example['image'], example['label']))`.", field=where)


def _packer(class_weight: tf.Tensor | None) -> Callable[..., tuple[Nest, tuple[Nest, tf.Tensor]]]:
    def pack(x: Nest, y: Nest, weights: tf.Tensor | None = None) -> tuple[Nest, tuple[Nest, tf.Tensor]]:
        batch = tf.shape(tf.nest.flatten(y)[0])[:1]
        weights = tf.ones(batch, tf.float32) if weights is None else tf.reshape(tf.cast(weights, tf.float32), batch)
        if class_weight is not None:
            classes = y if y.shape.rank == 1 or y.shape[-1] == 1 else tf.argmax(y, axis=-1)
            weights *= tf.gather(class_weight, tf.reshape(tf.cast(classes, tf.int64), [-1]))
        return x, (y, weights)

    return pack


def _map(dataset: tf.data.Dataset, pack: Callable[..., Nest]) -> tf.data.Dataset:
    """``dataset.map(pack)``, prefetched so the packing runs ahead of the step that takes the batch."""
    return dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(tf.data.AUTOTUNE)


def _packed(dataset: tf.data.Dataset, class_weight: tf.Tensor | None, where: str) -> tf.data.Dataset:
    _check_element(dataset.element_spec, where)
    if len(dataset.element_spec) == 2 and class_weight is None:
        return dataset
    return _map(dataset, _packer(class_weight))


def _arrays(x: KerasData, y: KerasData, sample_weight: KerasData) -> tuple[Nest, ...]:
    if y is None:
        raise TrainingError("`y` is None but `x` holds arrays: pass the labels, model.fit(x, y, ...).", field="y")
    return (x, y) if sample_weight is None else (x, y, sample_weight)


def per_worker(dataset: tf.data.Dataset) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A dataset_fn that rebuilds ``dataset`` wherever it runs, sharded by the input context.

    The graph is serialized here, as a string tensor a worker can receive;
    a dataset's own variant tensor cannot leave this process. (It is a captured input of the
    function the chief schedules: as a constant, a graph optimizer would fold the rebuilt dataset
    into a constant variant, which cannot travel. So the graphs ``keras_dist._ship`` builds for
    the workers cannot hold it either: the chief coordinates such input.)
    """
    serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(dataset),
                                             external_state_policy=0, strip_device_assignment=True)
    spec = dataset.element_spec

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        rebuilt = tf.data.experimental.from_variant(tf.raw_ops.DatasetFromGraph(graph_def=serialized), spec)
        if context.num_input_pipelines == 1:
            return rebuilt
        return rebuilt.shard(context.num_input_pipelines, context.input_pipeline_id)

    return dataset_fn


def _from_dataset(dataset: tf.data.Dataset, *, steps_per_epoch: int | None, needed: Callable[[int], int],
                  kind: str) -> TrainInput:
    cardinality = int(dataset.cardinality())
    if kind == "parameter_server":
        if cardinality >= 0:
            raise TrainingError(
                f"`x` is a dataset of {cardinality} batches that ends, but under ParameterServerStrategy each "
                f"worker keeps drawing batches from its own copy until fit has taken {needed(steps_per_epoch or 0)} "
                "steps over all workers: the dataset must be repeated. Add .repeat() to it (as TensorFlow's "
                "parameter-server tutorial does: .shuffle(...).repeat()).", field="x")
        return TrainInput(per_worker(dataset), cast(int, steps_per_epoch), dataset.element_spec)
    if steps_per_epoch is None:
        if cardinality in (_INFINITE, _UNKNOWN):
            what = "repeated (infinite)" if cardinality == _INFINITE else "of unknown length"
            raise TrainingError(
                f"`steps_per_epoch` is None but the dataset is {what}, so an epoch has no end. "
                "Pass steps_per_epoch=<batches per epoch>.", field="steps_per_epoch")
        return TrainInput(dataset.repeat(), cardinality, dataset.element_spec)  # an epoch is one pass, as in Keras
    if cardinality >= 0 and cardinality < needed(steps_per_epoch):
        raise TrainingError(
            f"`x` has {cardinality} batches but fit needs {needed(steps_per_epoch)} (steps_per_epoch="
            f"{steps_per_epoch} for each epoch): the dataset must be repeated. Add .repeat() to it, or drop "
            "steps_per_epoch to make an epoch one pass over it.", field="x")
    return TrainInput(dataset, steps_per_epoch, dataset.element_spec)


def _from_function(dataset_fn: Callable[..., tf.data.Dataset], *, steps_per_epoch: int | None, workers: int,
                   needed: Callable[[int], int], pack: Callable[..., Nest], weighted: bool) -> TrainInput:
    if steps_per_epoch is None:
        raise TrainingError(
            "`steps_per_epoch` is None but `x` is a dataset function, whose datasets are repeated and have "
            "no end. Pass steps_per_epoch=<global batches per epoch>.", field="steps_per_epoch")
    probe = dataset_fn(tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=0))
    if not isinstance(probe, tf.data.Dataset):
        raise TrainingError(f"`x` is a function that returned {type(probe).__name__}; it must return a "
                            "tf.data.Dataset for the input_context it is given.", field="x")
    _check_element(probe.element_spec, "x")
    cardinality = int(probe.cardinality())
    if cardinality >= 0:
        raise TrainingError(
            f"`x`'s dataset has {cardinality} batches and ends, but each worker keeps drawing batches until "
            f"fit has taken {needed(steps_per_epoch)} steps over all workers: the dataset must be repeated. "
            "Add .repeat() at the end of the dataset function.", field="x")
    if len(probe.element_spec) == 2 and not weighted:
        return TrainInput(dataset_fn, steps_per_epoch, probe.element_spec)
    return TrainInput(lambda context: _map(dataset_fn(context), pack), steps_per_epoch, probe.element_spec)


def training_input(x: KerasData, y: KerasData = None, *, sample_weight: KerasData = None,
                   class_weight: Mapping[int, float] | None = None,
                   batch_size: int | None = None, shuffle: bool = True, steps_per_epoch: int | None = None,
                   epochs: int = 1, initial_epoch: int = 0, kind: str, workers: int) -> TrainInput:
    """The engine's training input for ``model.fit(x, y, ...)`` under a strategy of ``kind``."""
    if kind == "parameter_server" and steps_per_epoch is None:
        raise TrainingError(
            "`steps_per_epoch` is None, but under ParameterServerStrategy workers draw batches from their own "
            "repeated datasets and an epoch only ends after a fixed number of steps. Pass "
            "steps_per_epoch=<global batches per epoch>, e.g. len(x_train) // global_batch_size.",
            field="steps_per_epoch")
    weights = _class_weights(class_weight)
    pack = _packer(weights)

    def needed(steps_per_epoch: int) -> int:  # the steps this fit takes
        return steps_per_epoch * max(epochs - initial_epoch, 1)

    if isinstance(x, tf.data.Dataset):
        if y is not None or sample_weight is not None:
            raise TrainingError("`y` and `sample_weight` must be None when `x` is a dataset; put them in its "
                                "elements: (x, y) or (x, y, sample_weight).", field="y")
        return _from_dataset(_packed(x, weights, "x"), steps_per_epoch=steps_per_epoch, needed=needed, kind=kind)
    if callable(x):
        return _from_function(x, steps_per_epoch=steps_per_epoch, workers=workers, needed=needed, pack=pack,
                              weighted=weights is not None)
    arrays = _arrays(x, y, sample_weight)
    size = batch_size or 32
    examples = len(tf.nest.flatten(arrays[0])[0])

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices(arrays).shard(context.num_input_pipelines,
                                                                   context.input_pipeline_id)
        if shuffle:
            dataset = dataset.shuffle(max(examples // max(context.num_input_pipelines, 1), 1))
        dataset = dataset.batch(context.get_per_replica_batch_size(size), drop_remainder=True)
        dataset = dataset.repeat()
        return dataset if len(arrays) == 2 and weights is None else _map(dataset, pack)

    spec = tf.nest.map_structure(lambda a: tf.TensorSpec([None, *np.shape(a)[1:]], np.asarray(a).dtype), arrays)
    return TrainInput(dataset_fn, steps_per_epoch or max(examples // size, 1), spec)


def evaluation_input(data: KerasData, *, batch_size: int | None = None, steps: int | None = None,
                     where: str = "validation_data") -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A dataset_fn over the whole evaluation set (one process evaluates all of it, exactly)."""
    if isinstance(data, tf.data.Dataset):
        dataset = data
    elif callable(data):
        dataset = data(tf.distribute.InputContext())
    elif isinstance(data, (tuple, list)) and len(data) in (2, 3):
        dataset = tf.data.Dataset.from_tensor_slices(tuple(data)).batch(batch_size or 32)
    else:
        raise TrainingError(f"`{where}` must be (x, y), (x, y, sample_weight), a tf.data.Dataset or a dataset "
                            f"function. Received: {type(data).__name__}.", field=where)
    if steps is None and int(dataset.cardinality()) == _INFINITE:
        raise TrainingError(f"`{where}` is repeated (infinite) and no number of steps was given, so evaluation "
                            "would never end. Pass validation_steps=<batches> (steps= for evaluate).", field=where)
    packed = _packed(dataset, None, where)
    return lambda context: packed


def prediction_batches(x: KerasData, *, batch_size: int | None = None, steps: int | None = None) -> tf.data.Dataset:
    """Batches of features for ``predict`` (labels, if present, are dropped)."""
    if isinstance(x, tf.data.Dataset):
        dataset = x.map(lambda *e: e[0]) if isinstance(x.element_spec, tuple) else x
    elif callable(x):
        return prediction_batches(x(tf.distribute.InputContext()), steps=steps)
    else:
        dataset = tf.data.Dataset.from_tensor_slices(x).batch(batch_size or 32)
    if steps is not None:
        return dataset.take(steps)
    if int(dataset.cardinality()) == _INFINITE:
        raise TrainingError("`x` is repeated (infinite) and steps is None, so predict would never end. Pass steps=.",
                            field="steps")
    return dataset
