"""Where every variable, shard and optimizer slot of a model lives, as a table to print."""
from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from toolkit.keras_distribution._sharded import weight_of_shard

__all__ = ["placement_rows", "placement_report"]


def _devices(variable: Any) -> list[str]:
    value = getattr(variable, "value", variable)
    if isinstance(value, tf.distribute.DistributedValues):
        return [str(v.device) for v in value.distribute_strategy.experimental_local_results(value)]
    return [str(getattr(value, "device", "") or "?")]


def _short(device: str) -> str:
    spec = tf.DeviceSpec.from_string(device)
    where = f"{spec.job}:{spec.task} " if spec.job and spec.job != "localhost" else ""
    return f"{where}{spec.device_type}:{spec.device_index}"


def _position(shards: list[Any], variable: Any) -> int:
    return next(i for i, shard in enumerate(shards) if shard is variable)


def placement_rows(model: keras.Model) -> list[dict[str, Any]]:
    """One row per variable or shard: logical path, layout, shard, devices, shape, bytes, slot devices."""
    optimizer = getattr(model, "optimizer", None)
    slots = list(getattr(optimizer, "variables", []) or [])
    rows = []
    for variable in model.weights:
        weight = weight_of_shard(variable)
        prefix = variable.path.replace("/", "_") + "_"
        own_slots = [s for s in slots if s.name.startswith(prefix) or s.path.split("/")[-1].startswith(prefix)]
        rows.append({
            "variable": weight.path if weight else variable.path,
            "layout": str(weight.split.axes) if weight else "whole",
            "shard": f"{_position(weight.shards, variable)}/{len(weight.shards)}" if weight else "-",
            "devices": [_short(d) for d in _devices(variable)],
            "shape": tuple(variable.shape),
            "bytes": int(np.prod(variable.shape)) * np.dtype(variable.dtype).itemsize,
            "slots": sorted({_short(d) for s in own_slots for d in _devices(s)}),
        })
    return rows


def placement_report(model: keras.Model) -> str:
    """A table of where each variable (each shard of a split one) and its optimizer slots live."""
    header = ("variable", "layout", "shard", "device", "shape", "bytes", "slots on")
    lines = [header]
    for row in placement_rows(model):
        lines.append((row["variable"], row["layout"], row["shard"], ", ".join(row["devices"]), str(row["shape"]),
                      f"{row['bytes']:,}", ", ".join(row["slots"]) or "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in lines]
    text.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(text)
