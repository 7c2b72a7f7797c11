"""Variables a ``ModelParallel`` layout splits: shards on the mesh's devices, one logical weight.

A layout that shards dimension *d* of a variable over a mesh axis of size
*n* makes ``Layer.add_weight`` create *n* Keras variables (``kernel_shard0``
...), each on its device, holding its slice of the initial value. The layer
(and every Keras loop) then trains the shards: they are the layer's
trainable variables, so gradients and optimizer slots are per shard and live
beside it. The attribute the layer keeps (``dense.kernel``) is a
``ShardedWeight``: it reads as the whole tensor (the shards concatenated)
and ``assign`` splits a whole value. Keras weight files store that whole
tensor, so a checkpoint restores into any mesh, or into no distribution.

``Dense`` layers compute on the shards where they live (a column-split kernel
gives each device its slice of the output; a row-split kernel gives each
device its part of the sum), forward and backward. Other layers read the
whole weight on the device that uses it.
"""
from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from toolkit._compat import keras as _compat
from toolkit._compat import tensorflow as tf_compat

__all__ = ["Split", "ShardedWeight", "sharded_weights", "weight_of_shard", "install_layer_hooks"]


@dataclasses.dataclass(frozen=True)
class Split:
    """How one variable is split: ``dim`` cut into ``bounds`` on ``devices`` (mesh axis ``mesh_axis``)."""

    path: str
    layout_key: str
    axes: tuple[str | None, ...]
    dim: int
    mesh_axis: str
    devices: tuple[str, ...]
    bounds: tuple[tuple[int, int], ...]
    #: on a 2-D mesh, each shard's device in every replica of the batch axis (empty: one replica)
    replicas: tuple[tuple[str, ...], ...] = ()


class ShardedWeight:
    """A weight Keras sees whole, stored as shards on several devices (see the module docstring)."""

    def __init__(self, split: Split, shape: Sequence[int], dtype: str, shards: Sequence[Any]) -> None:
        self.split = split
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.shards = list(shards)
        self.path = split.path
        self.name = split.path.rsplit("/", 1)[-1]

    @property
    def trainable(self) -> bool:
        return bool(getattr(self.shards[0], "trainable", True))

    @property
    def value(self) -> tf.Tensor:
        return tf.concat([tf.convert_to_tensor(shard) for shard in self.shards], axis=self.split.dim)

    def __tf_tensor__(self, dtype: tf.DType | None = None, name: str | None = None) -> tf.Tensor:
        value = self.value
        return value if dtype is None else tf.cast(value, dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.numpy(), dtype=dtype)

    def numpy(self) -> np.ndarray:
        return np.asarray(self.value)

    def assign(self, value: Any) -> None:
        whole = tf.convert_to_tensor(value, dtype=self.dtype)
        if tuple(whole.shape) != self.shape:
            raise ValueError(f"cannot assign a value of shape {tuple(whole.shape)} to {self.path!r} of shape "
                             f"{self.shape} (stored in {len(self.shards)} shards).")
        for shard, (start, stop) in zip(self.shards, self.split.bounds, strict=True):
            index = [slice(None)] * len(self.shape)
            index[self.split.dim] = slice(start, stop)
            shard.assign(whole[tuple(index)])

    def __repr__(self) -> str:
        return (f"<ShardedWeight path={self.path} shape={self.shape} dim={self.split.dim} over "
                f"{self.split.mesh_axis!r}: {', '.join(self.split.devices)}>")


_by_layer: weakref.WeakKeyDictionary[keras.layers.Layer, dict[str, ShardedWeight]] = weakref.WeakKeyDictionary()
_by_shard: dict[int, tuple[weakref.ref[Any], ShardedWeight]] = {}


def sharded_weights(layer: keras.layers.Layer) -> dict[str, ShardedWeight]:
    """The sharded weights ``layer`` itself created, by name."""
    return dict(_by_layer.get(layer, {}))


def weight_of_shard(variable: Any) -> ShardedWeight | None:
    """The sharded weight a shard variable belongs to (None: not a shard)."""
    found = _by_shard.get(id(variable))
    return found[1] if found is not None and found[0]() is variable else None


def shard_variables(split: Split, *, create: Callable[..., Any], shape: Sequence[int], dtype: str,
                    initializer: Callable[..., Any], name: str) -> ShardedWeight:
    """Creates the shards of one weight with ``create`` (the layer's own ``add_weight``)."""
    with tf.device("/device:CPU:0"):
        whole = tf.convert_to_tensor(initializer(tuple(shape), dtype))  # drawn once, as for the whole variable
    shards = []
    for index, (start, stop) in enumerate(split.bounds):
        part = [slice(None)] * len(shape)
        part[split.dim] = slice(start, stop)
        piece = whole[tuple(part)]
        shard_shape = list(shape)
        shard_shape[split.dim] = stop - start
        with _placed(split, index):
            shards.append(create(shape=tuple(shard_shape), initializer=lambda s, dtype=None, v=piece: v,
                                 dtype=dtype, name=f"{name}_shard{index}"))
    weight = ShardedWeight(split, shape, dtype, shards)
    for shard in shards:
        _by_shard[id(shard)] = (weakref.ref(shard), weight)
    return weight


def _placed(split: Split, index: int) -> Any:
    """Where shard ``index`` is created: its device, or (2-D mesh) its device in every replica."""
    return tf_compat.mirrored_on(split.replicas[index]) if split.replicas else tf.device(split.devices[index])


def _device_of(shard: Any, split: Split, index: int) -> str:
    """The device shard ``index`` is read on here: on a 2-D mesh, the current replica's copy's."""
    return str(shard.value.device) if split.replicas else split.devices[index]


def _logical_variables(layer: keras.layers.Layer) -> list[Any]:
    """The layer's own variables with each weight's shards replaced by the weight, in creation order."""
    logical: list[Any] = []
    for variable in _compat.own_variables(layer):
        weight = weight_of_shard(variable)
        item = variable if weight is None else weight
        if not any(item is seen for seen in logical):
            logical.append(item)
    return logical


def _save_own_variables(layer: keras.layers.Layer) -> Callable[[Any], None]:
    def save_own_variables(store: Any) -> None:
        for index, variable in enumerate(_logical_variables(layer)):
            store[str(index)] = np.asarray(variable)
    return save_own_variables


def _load_own_variables(layer: keras.layers.Layer) -> Callable[[Any], None]:
    def load_own_variables(store: Any) -> None:
        variables = _logical_variables(layer)
        if len(store.keys()) != len(variables):
            raise ValueError(f"Layer {layer.name!r} has {len(variables)} weights (sharded weights counted whole) "
                             f"but the saved layer has {len(store.keys())}.")
        for index, variable in enumerate(variables):
            variable.assign(store[str(index)])
    return load_own_variables


def _on_device(device: str, function: Callable[[tf.Tensor], tf.Tensor], inputs: tf.Tensor) -> tf.Tensor:
    """``function(inputs)`` on ``device``, its backward pass too (TF would put gradients where tape.gradient runs)."""
    if isinstance(inputs, keras.KerasTensor) or not tf.is_tensor(inputs):
        with tf.device(device):
            return function(inputs)

    @tf.custom_gradient
    def placed(x: tf.Tensor) -> Any:
        with tf.device(device), tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)

        def grad(upstream: tf.Tensor, variables: Sequence[tf.Variable] | None = None) -> Any:
            watched = list(variables or ())
            with tf.device(device):
                grads = tape.gradient(y, [x, *watched], output_gradients=upstream)
            return grads[0], grads[1:]

        return y, grad

    return placed(inputs)


def _dense_call(layer: keras.layers.Dense, kernel: ShardedWeight) -> Callable[..., Any]:
    split = kernel.split

    def call(inputs: Any, training: Any = None) -> Any:
        inputs = tf.convert_to_tensor(inputs) if not isinstance(inputs, keras.KerasTensor) else inputs
        bias = sharded_weights(layer).get("bias")
        parts = []
        for index, (start, stop) in enumerate(split.bounds):
            shard = kernel.shards[index]
            device = _device_of(shard, split, index)
            bias_shard = bias.shards[index] if bias is not None and split.dim == 1 else None
            if split.dim == 1:
                def column(x: tf.Tensor, shard: Any = shard, bias_shard: Any = bias_shard) -> tf.Tensor:
                    y = keras.ops.matmul(x, shard)
                    return y if bias_shard is None else y + bias_shard
                parts.append(_on_device(device, column, inputs))
            else:
                def row(x: tf.Tensor, shard: Any = shard, start: int = start, stop: int = stop) -> tf.Tensor:
                    return keras.ops.matmul(x[..., start:stop], shard)
                parts.append(_on_device(device, row, inputs))
        outputs = tf.concat(parts, axis=-1) if split.dim == 1 else tf.add_n(parts)
        if layer.use_bias and (split.dim == 0 or bias is None):
            outputs = outputs + (bias.value if bias is not None else layer.bias)
        return layer.activation(outputs) if layer.activation is not None else outputs

    return call


def _aligned_bias(layer: keras.layers.Layer, kernel: ShardedWeight, bias: ShardedWeight) -> bool:
    return kernel.split.dim == 1 and bias.split.devices == kernel.split.devices and \
        bias.split.bounds == kernel.split.bounds


def install_layer_hooks(layer: keras.layers.Layer, name: str, weight: ShardedWeight) -> None:
    """Records ``weight`` on ``layer``; saves/loads the layer's weights whole; Dense computes on the shards."""
    weights = _by_layer.setdefault(layer, {})
    weights[name] = weight
    layer.save_own_variables = _save_own_variables(layer)
    layer.load_own_variables = _load_own_variables(layer)
    kernel = weights.get("kernel")
    if not isinstance(layer, keras.layers.Dense) or kernel is None:
        return
    bias = weights.get("bias")
    if bias is not None and not _aligned_bias(layer, kernel, bias):
        layer.call = lambda inputs, training=None: _gathered_dense(layer, inputs)
        return
    layer.call = _dense_call(layer, kernel)


def _gathered_dense(layer: keras.layers.Dense, inputs: Any) -> Any:
    outputs = keras.ops.matmul(inputs, layer.kernel) + layer.bias
    return layer.activation(outputs) if layer.activation is not None else outputs
