"""Device names as TensorFlow sees them: parse, complete, look up, compare.

TensorFlow accepts a device string that names no existing device and, with soft
placement on (the TF2 default), silently runs the work on CPU:0. Model
parallelism that quietly collapses onto one device is worse than an error, so
every device a placement names is resolved here against the devices that
really exist in this process (local logical devices, plus the remote tasks of
a cluster this process has connected to).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

if TYPE_CHECKING:
    import keras

__all__ = [
    "available_devices",
    "describe_bytes",
    "device_matches",
    "parse_device",
    "resolve_device",
    "variable_device",
]


def parse_device(text: str, *, field: str) -> tf.DeviceSpec:
    """Parses ``text`` or raises ``ValueError`` naming ``field``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            f"`{field}` must be a device string such as '/device:CPU:1' or "
            f"'/job:worker/replica:0/task:1/device:CPU:0'. Received: {text!r}."
        )
    try:
        return tf.DeviceSpec.from_string(text)
    except ValueError as exc:
        raise ValueError(
            f"`{field}` is {text!r}, which is not a device string ({exc}). "
            "Use the form '/job:<job>/replica:<r>/task:<t>/device:<TYPE>:<i>' "
            "or '/device:CPU:1'."
        ) from exc


def _local_task() -> tf.DeviceSpec:
    """The job/replica/task of this process: where an op without a job runs.

    An eager constant is always created on the local host CPU, so its device
    string names the local task whether or not a cluster is connected.
    """
    host = tf.DeviceSpec.from_string(tf.constant(0.0).device)
    return tf.DeviceSpec(job=host.job, replica=host.replica, task=host.task)


def _complete(spec: tf.DeviceSpec, local: tf.DeviceSpec) -> tf.DeviceSpec:
    """Fills the job/replica/task a device string left out, as TF does."""
    if spec.job is None:
        return local.make_merged_spec(spec)
    return spec.replace(
        replica=0 if spec.replica is None else spec.replica,
        task=0 if spec.task is None else spec.task,
    )


def available_devices() -> list[str]:
    """Full names of every logical device this process can place work on."""
    local = _local_task()
    return [_complete(tf.DeviceSpec.from_string(device.name), local).to_string()
            for device in tf.config.list_logical_devices()]


def device_matches(wanted: tf.DeviceSpec, actual: tf.DeviceSpec) -> bool:
    """True when every field ``wanted`` sets is the same in ``actual``."""
    for attr in ("job", "replica", "task", "device_type", "device_index"):
        value = getattr(wanted, attr)
        if value is None:
            continue
        other = getattr(actual, attr)
        if attr == "device_type":
            value, other = str(value).upper(), str(other or "").upper()
        if value != other:
            return False
    return True


def resolve_device(text: str, *, field: str) -> str:
    """The full name of the existing device ``text`` designates.

    Args:
        text: a device string; job/replica/task may be omitted (local task) and
            so may the device type (the task's first device, its CPU:0).
        field: the name used in error messages (e.g. ``"rules['head']"``).

    Raises:
        ValueError: the string is malformed or names no existing device; the
            message lists the devices that do exist.
    """
    devices = available_devices()
    wanted = _complete(parse_device(text, field=field), _local_task())
    for name in devices:
        if device_matches(wanted, tf.DeviceSpec.from_string(name)):
            return name
    listing = ", ".join(devices) or "(none)"
    raise ValueError(
        f"`{field}` is {text!r}, which is not a device of this process "
        f"(available: {listing}). Fix the device name; for more local CPUs call "
        "strategies.configure_local_devices(n) before TensorFlow starts; for the "
        "devices of other tasks connect first (strategies.device_map.in_graph_session)."
    )


def variable_device(variable: keras.Variable | tf.Variable) -> str:
    """The device string of a Keras 3 or a plain TensorFlow variable."""
    inner = getattr(variable, "value", None)
    if isinstance(inner, tf.Variable):
        return inner.device
    return variable.device


def describe_bytes(count: int) -> str:
    """``1536`` -> ``'1.5 KiB'``: sizes a person can compare at a glance."""
    if count < 1024:
        return f"{count} B"
    value, unit = float(count), "B"
    for unit in ("KiB", "MiB", "GiB"):  # noqa: B007 - the unit the loop stops at is the answer
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"
