"""What a ``keras.distribution`` Distribution means on TensorFlow, checked before anything is built.

``plan(distribution)`` validates the mesh and layouts against the devices and
the cluster, and picks the tf.distribute strategy the batch axis maps to:

* batch axis of one device: no strategy (the default one);
* batch axis over several local devices, one process: ``MirroredStrategy``;
* several processes (TF_CONFIG or ``initialize``): ``MultiWorkerMirroredStrategy``.

Layouts that split variables over another axis are done by ``_sharded``. On a
2-D mesh each shard is mirrored over the batch axis: replica *i*'s copy of
shard *k* lives on mesh device [*i*, *k*]. A split over the batch axis itself
(a variable split across replicas) cannot be expressed and is refused.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import keras
import numpy as np

from toolkit._compat import keras as _compat
from toolkit.keras_distribution import _cluster
from toolkit.keras_distribution._devices import list_devices, tf_name
from toolkit.keras_distribution._errors import KerasDistributionError
from toolkit.keras_distribution._sharded import Split

__all__ = ["Plan", "plan", "split_for", "splitting_keys"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A checked distribution: the strategy kind and devices its batch axis maps to."""

    distribution: Any
    strategy_kind: str | None  # None, "mirrored" or "multi_worker_mirrored"
    replica_devices: tuple[str, ...]
    #: a 2-D mesh: shards mirrored on other devices than the replicas', which TF's collective
    #: all-reduce (its default on several CPUs) cannot group; gradients go through one device instead
    reduce_to_one: bool = False

    @property
    def model_parallel(self) -> bool:
        return isinstance(self.distribution, keras.distribution.ModelParallel)


def _layouts(distribution: Any) -> list[tuple[str, Any]]:
    if not isinstance(distribution, keras.distribution.ModelParallel):
        return []
    layout_map = _compat.layout_map_of(distribution)
    return [] if layout_map is None else list(layout_map.items())


def _axis_sizes(mesh: Any) -> dict[str, int]:
    return dict(zip(mesh.axis_names, (int(s) for s in mesh.shape), strict=True))


def _check_devices(mesh: Any) -> None:
    wanted = [str(d) for d in np.asarray(mesh.devices).flatten()]
    available = list_devices()
    known = {tf_name(d) for d in available}
    if len(wanted) > len(available):
        raise KerasDistributionError(
            f"The DeviceMesh of shape {tuple(mesh.shape)} needs {len(wanted)} devices but this job has "
            f"{len(available)}: {', '.join(available)}. Make the mesh smaller, or give TensorFlow more devices "
            "(strategies.configure_local_devices(n) for logical CPUs, at the top of the script).",
            field="device_mesh")
    for device in wanted:
        if tf_name(device) not in known:
            raise KerasDistributionError(
                f"The DeviceMesh lists device {device!r}, which this job does not have (it has: "
                f"{', '.join(available)}). Build the mesh from keras.distribution.list_devices().",
                field="device_mesh.devices")


def _check_layout(key: str, layout: Any, sizes: dict[str, int], batch: str) -> None:
    for axis in layout.axes:
        if axis is not None and axis not in sizes:
            raise KerasDistributionError(
                f"The layout {key!r} shards over mesh axis {axis!r}, which the mesh does not have (its axes: "
                f"{', '.join(sizes)}). Use one of those names, or None to keep that dimension whole.",
                field=f"layout_map[{key!r}]")
    split = [a for a in layout.axes if a is not None and sizes[a] > 1]
    if batch in split:
        raise KerasDistributionError(
            f"The layout {key!r} {tuple(layout.axes)} splits variables over the batch axis {batch!r} "
            f"({sizes[batch]} replicas). TensorFlow's mirrored strategies keep a copy of each variable (or of "
            "each shard) on every replica; they cannot split a variable over the replicas themselves (JAX's "
            "FSDP-style layout). Split over another mesh axis, or use None for that dimension.",
            field=f"layout_map[{key!r}]")
    if split and _cluster.num_processes() > 1:
        raise KerasDistributionError(
            f"The layout {key!r} {tuple(layout.axes)} splits variables over {split[0]!r} in a "
            f"{_cluster.num_processes()}-process job. tfdist splits variables within one process (or across the "
            "ps of an in-graph session); MultiWorkerMirrored keeps each variable whole on every worker. Drop the "
            "split (data parallel), or run one process.", field=f"layout_map[{key!r}]")
    if len(split) > 1:
        raise KerasDistributionError(
            f"The layout {key!r} {tuple(layout.axes)} splits two dimensions; tfdist splits a variable along one "
            "dimension. Keep one axis name and set the others to None.", field=f"layout_map[{key!r}]")


def plan(distribution: Any) -> Plan | None:
    """Checks ``distribution`` (a keras.distribution DataParallel or ModelParallel) and plans it."""
    if distribution is None:
        return None
    if not isinstance(distribution, (keras.distribution.DataParallel, keras.distribution.ModelParallel)):
        raise KerasDistributionError(
            f"`set_distribution` got {type(distribution).__name__}; tfdist runs keras.distribution.DataParallel "
            "and keras.distribution.ModelParallel.", field="distribution")
    mesh = distribution.device_mesh
    sizes = _axis_sizes(mesh)
    batch = distribution.batch_dim_name or mesh.axis_names[0]
    if batch not in sizes:
        raise KerasDistributionError(
            f"`batch_dim_name` is {batch!r} but the mesh's axes are {', '.join(sizes)}. Pass one of them.",
            field="batch_dim_name")
    _check_devices(mesh)
    layouts = _layouts(distribution)
    for key, layout in layouts:
        _check_layout(key, layout, sizes, batch)
    processes = _cluster.num_processes()
    devices = np.asarray(mesh.devices)
    if processes > 1:
        total = len(list_devices())
        if sizes[batch] != devices.size or devices.size != total:
            raise KerasDistributionError(
                f"The mesh {dict(sizes)} spans {devices.size} devices with a batch axis of {sizes[batch]}, but a "
                f"{processes}-process job runs MultiWorkerMirroredStrategy, one replica on each of its {total} "
                "devices. Use DataParallel(devices=keras.distribution.list_devices()).", field="device_mesh")
        return Plan(distribution, "multi_worker_mirrored", tuple(str(d) for d in devices.flatten()))
    if sizes[batch] == 1:
        return Plan(distribution, None, ())
    along = np.moveaxis(devices, mesh.axis_names.index(batch), 0).reshape(sizes[batch], -1)[:, 0]
    two_d = any(axis is not None and axis != batch and sizes[axis] > 1 for _, layout in layouts
                for axis in layout.axes)
    return Plan(distribution, "mirrored", tuple(tf_name(str(d)) for d in along), reduce_to_one=two_d)


def splitting_keys(current: Plan) -> list[str]:
    """The layout keys of variables (not '.../output' tensors) whose layout splits over a mesh axis > 1."""
    sizes = _axis_sizes(current.distribution.device_mesh)
    return [key for key, layout in _layouts(current.distribution) if not key.endswith("output")
            and any(axis is not None and sizes.get(axis, 1) > 1 for axis in layout.axes)]


def _matching_key(distribution: Any, path: str) -> str:
    for key, _ in _layouts(distribution):
        if key == path or re.fullmatch(key, path):
            return key
    return path


def split_for(current: Plan, path: str, shape: tuple[int, ...]) -> Split | None:
    """How the layout of the variable at ``path`` splits it, or None when it stays whole."""
    if not current.model_parallel:
        return None
    distribution = current.distribution
    layout_map = _compat.layout_map_of(distribution)
    layout = None if layout_map is None else layout_map[path]
    if layout is None:
        return None
    mesh = distribution.device_mesh
    sizes = _axis_sizes(mesh)
    key = _matching_key(distribution, path)
    axes = tuple(layout.axes)
    if len(axes) != len(shape):
        raise KerasDistributionError(
            f"The layout {key!r} {axes} has {len(axes)} axes but variable {path!r} has shape {shape} "
            f"({len(shape)} dimensions). Give one axis (or None) per dimension.", field=f"layout_map[{key!r}]")
    split = [(dim, axis) for dim, axis in enumerate(axes) if axis is not None and sizes[axis] > 1]
    if not split:
        return None
    dim, axis = split[0]
    count = sizes[axis]
    if shape[dim] % count:
        raise KerasDistributionError(
            f"The layout {key!r} {axes} splits dimension {dim} of variable {path!r} (shape {shape}) over mesh "
            f"axis {axis!r} of {count} devices, but {shape[dim]} does not divide by {count}. Choose a size that "
            f"divides, a mesh axis of a size that divides {shape[dim]}, or None for that dimension.",
            field=f"layout_map[{key!r}]")
    devices = np.asarray(mesh.devices)
    batch = distribution.batch_dim_name or mesh.axis_names[0]
    grid = np.moveaxis(devices, (mesh.axis_names.index(batch), mesh.axis_names.index(axis)), (0, 1))
    grid = grid.reshape(sizes[batch], count, -1)[:, :, 0]  # [replica, shard]
    step = shape[dim] // count
    replicas = () if sizes[batch] == 1 else tuple(tuple(tf_name(str(d)) for d in grid[:, k]) for k in range(count))
    return Split(path=path, layout_key=key, axes=axes, dim=dim, mesh_axis=axis,
                 devices=tuple(tf_name(str(d)) for d in grid[0]),
                 bounds=tuple((i * step, (i + 1) * step) for i in range(count)), replicas=replicas)
