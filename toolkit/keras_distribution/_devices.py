"""Device names: Keras' ``"cpu:0"`` and TensorFlow's ``"/device:CPU:0"`` (or a task's full name)."""
from __future__ import annotations

import re

import tensorflow as tf

from toolkit.keras_distribution import _cluster

__all__ = ["keras_name", "list_devices", "tf_name"]

_SHORT = re.compile(r"^(cpu|gpu|tpu):(\d+)$", re.IGNORECASE)


def tf_name(device: str) -> str:
    """``"cpu:1"`` -> ``"/device:CPU:1"``; a full TensorFlow name is kept as it is."""
    match = _SHORT.match(str(device).strip())
    if match:
        return f"/device:{match.group(1).upper()}:{match.group(2)}"
    return tf.DeviceSpec.from_string(str(device)).to_string()


def keras_name(device: str) -> str:
    """``"/job:localhost/replica:0/task:0/device:CPU:1"`` -> ``"cpu:1"``; another task's device keeps its full name."""
    spec = tf.DeviceSpec.from_string(device)
    if spec.job not in (None, "localhost"):
        return spec.to_string()
    return f"{(spec.device_type or 'cpu').lower()}:{spec.device_index or 0}"


def _local_count(device_type: str) -> int:
    """Devices of a type one process has, without initialising TensorFlow's runtime (MWMS needs that later)."""
    physical = tf.config.list_physical_devices(device_type)
    if not physical:
        return 0
    logical = tf.config.get_logical_device_configuration(physical[0])
    return len(physical) if not logical or device_type != "CPU" else len(logical)


def list_devices(device_type: str | None = None) -> list[str]:
    """Keras' ``list_devices``: this process's devices, or every process's in a multi-process cluster.

    One process: Keras-style names (``"cpu:0"``), plus the full names of the
    devices of tasks it is connected to (``strategies.device_map.in_graph_session``:
    ``"/job:ps/replica:0/task:0/device:CPU:0"``). Several: TensorFlow task
    names (``"/job:worker/replica:0/task:1/device:CPU:0"``), every task
    assumed to have as many devices as this one (MultiWorkerMirrored
    requires it).
    """
    kind = device_type.upper() if device_type else ("GPU" if tf.config.list_physical_devices("GPU") else "CPU")
    config = _cluster.cluster()
    if config is None:
        return [keras_name(d.name) for d in tf.config.list_logical_devices(kind)]
    count = _local_count(kind)
    return [f"/job:{job}/replica:0/task:{index}/device:{kind}:{i}"
            for job, index in _cluster.training_tasks(config) for i in range(count)]
