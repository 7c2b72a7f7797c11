"""Keras' TensorFlow ``distribution_lib``, as the JAX and Torch backends implement it.

These functions replace the prototype's in Keras' TensorFlow backend
(through ``toolkit._compat.keras``), so Keras' public ``keras.distribution``
calls them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from toolkit.keras_distribution import _cluster
from toolkit.keras_distribution._devices import list_devices, tf_name
from toolkit.keras_distribution._errors import KerasDistributionError
from toolkit.keras_distribution._sharded import ShardedWeight, Split

__all__ = ["FUNCTIONS", "distribute_data_input", "distribute_tensor", "distribute_variable", "get_device_count"]


def get_device_count(device_type: str | None = None) -> int:
    return len(list_devices(device_type))


def _batch_axis() -> str | None:
    distribution = keras.distribution.distribution()
    return None if distribution is None else (distribution.batch_dim_name or distribution.device_mesh.axis_names[0])


def _split_axes(layout: Any) -> list[str]:
    mesh = layout.device_mesh
    sizes = {} if mesh is None else dict(zip(mesh.axis_names, mesh.shape, strict=True))
    batch = _batch_axis()
    return [axis for axis in layout.axes if axis is not None and axis != batch and sizes.get(axis, 1) > 1]


def distribute_tensor(tensor: Any, layout: Any) -> Any:
    """A tensor laid out over the batch axis is already each replica's slice: it is returned as it is.

    A tensor split over another axis cannot be expressed (tf.distribute has
    no sharded tensors), so it is refused rather than ignored.
    """
    split = _split_axes(layout)
    if split:
        raise KerasDistributionError(
            f"A TensorLayout {tuple(layout.axes)} splits a tensor over mesh axis {split[0]!r}. On TensorFlow, "
            "tfdist splits variables (LayoutMap entries for variable paths), not intermediate tensors. Remove the "
            "layout for this tensor (an '.../output' key), or lay it out over the batch axis only.",
            field="layout")
    return tensor


def distribute_variable(value: Any, layout: Any) -> Any:
    """``value`` as variables laid out by ``layout``: split over one mesh axis, or one whole variable."""
    split_axes = _split_axes(layout)
    if not split_axes:
        return tf.Variable(value)
    axis = split_axes[0]
    mesh = layout.device_mesh
    value = tf.convert_to_tensor(value)
    dim = list(layout.axes).index(axis)
    count = dict(zip(mesh.axis_names, mesh.shape, strict=True))[axis]
    if value.shape[dim] % count:
        raise KerasDistributionError(
            f"The layout {tuple(layout.axes)} splits dimension {dim} (size {value.shape[dim]}) over {count} devices, "
            "which does not divide it.", field="layout")
    devices = np.moveaxis(np.asarray(mesh.devices), mesh.axis_names.index(axis), 0).reshape(count, -1)[:, 0]
    step = value.shape[dim] // count
    split = Split(path="distribute_variable", layout_key="distribute_variable", axes=tuple(layout.axes), dim=dim,
                  mesh_axis=axis, devices=tuple(tf_name(str(d)) for d in devices),
                  bounds=tuple((i * step, (i + 1) * step) for i in range(count)))
    shards = []
    for device, (start, stop) in zip(split.devices, split.bounds, strict=True):
        index = [slice(None)] * value.shape.rank
        index[dim] = slice(start, stop)
        with tf.device(device):
            shards.append(tf.Variable(value[tuple(index)]))
    return ShardedWeight(split, value.shape, value.dtype.name, shards)


def distribute_data_input(per_process_batch: Any, layout: Any, batch_dim_name: str) -> Any:
    """The strategy the batch axis maps to splits each process's batch over its replicas: returned as it is."""
    return per_process_batch


def _to_backend_mesh(device_mesh: Any) -> np.ndarray:
    """The mesh as an array of TensorFlow device names (what ``tf.device`` takes)."""
    return np.vectorize(lambda d: tf_name(str(d)))(np.asarray(device_mesh.devices))


def _to_backend_layout(tensor_layout: Any) -> tuple[tuple[str | None, ...], np.ndarray]:
    if tensor_layout.device_mesh is None:
        raise KerasDistributionError("The TensorLayout has no device mesh; put it in a LayoutMap or pass "
                                     "device_mesh=.", field="device_mesh")
    return tuple(tensor_layout.axes), _to_backend_mesh(tensor_layout.device_mesh)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "list_devices": list_devices, "get_device_count": get_device_count, "initialize": _cluster.initialize,
    "num_processes": _cluster.num_processes, "process_id": _cluster.process_id,
    "distribute_tensor": distribute_tensor, "distribute_variable": distribute_variable,
    "distribute_data_input": distribute_data_input, "_to_backend_mesh": _to_backend_mesh,
    "_to_backend_layout": _to_backend_layout,
}
