"""The placement table of a device map: who is where, and is it balanced.

A split that puts 95% of the parameters on one device is legal but useless;
the per-device totals make that visible before a long run starts.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from strategies import _placement_keras as pk
from strategies._placement import describe_bytes, variable_device

if TYPE_CHECKING:
    import keras

    from tf_config import Problem

__all__ = ["LayerPlacement", "placements", "render_placements", "render_table"]


@dataclasses.dataclass(frozen=True)
class LayerPlacement:
    """Where one layer's own variables live.

    Attributes:
        layer: the layer's path in the model (``encoder/dense``).
        device: the device the map assigns (``"(unmapped)"`` if none).
        actual: the distinct devices its variables are really on.
        params: number of scalars in its own variables.
        bytes: their size in memory.
        rule: which rule decided (``rule 'head'``, ``parent via ...``, ``default``).
    """

    layer: str
    device: str
    actual: tuple[str, ...]
    params: int
    bytes: int
    rule: str


def _size(variable: keras.Variable) -> tuple[int, int]:
    count = math.prod(int(dim) for dim in variable.shape)
    dtype = variable.dtype  # a tf.DType for TF variables, a string for Keras ones
    return count, count * np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize


def placements(model: keras.layers.Layer,
               device_for: Callable[[pk.LayerNode], tuple[str | None, str]]) -> list[LayerPlacement]:
    """One row per layer owning variables (including self-placing layers)."""
    rows = []
    for node in pk.layer_tree(model):
        variables = pk.own_variables(node.layer) + list(getattr(node.layer, "placed_variables", ()))
        if not variables:
            continue
        device, why = device_for(node)
        if getattr(node.layer, pk.OWN_PLACEMENT_ATTR, False):
            why = "places its own variables"
        sizes = [_size(v) for v in variables]
        actual = tuple(dict.fromkeys(variable_device(v) for v in variables))
        rows.append(LayerPlacement(
            layer=node.path,
            device=device or "(unmapped)",
            actual=actual,
            params=sum(s[0] for s in sizes),
            bytes=sum(s[1] for s in sizes),
            rule=why,
        ))
    return rows


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Sequence[int] = ()) -> str:
    """A plain-text table; columns in ``right`` are right-aligned (numbers)."""
    cells = [list(map(str, headers))] + [list(map(str, row)) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def _short(device: str) -> str:
    return device.replace("/job:localhost/replica:0/task:0", "")


def render_placements(rows: Sequence[LayerPlacement], problems: Sequence[Problem] = ()) -> str:
    """The table of :func:`placements`, per-device totals and every problem."""
    layer_rows = [
        (r.layer, _short(", ".join(r.actual)), f"{r.params:,}", describe_bytes(r.bytes), r.rule)
        for r in rows
    ]
    out = [render_table(("layer", "device", "params", "bytes", "placed by"), layer_rows, right=(2, 3))]
    totals: dict[str, list[int]] = {}
    for r in rows:
        for device in r.actual:
            entry = totals.setdefault(device, [0, 0, 0])
            entry[0] += 1
            entry[1] += r.params // len(r.actual)
            entry[2] += r.bytes // len(r.actual)
    grand = sum(t[2] for t in totals.values()) or 1
    device_rows = [
        (_short(d), n, f"{p:,}", describe_bytes(b), f"{100 * b / grand:.0f}%")
        for d, (n, p, b) in sorted(totals.items())
    ]
    out += ["", render_table(("device", "layers", "params", "bytes", "share"), device_rows, right=(1, 2, 3, 4))]
    if problems:
        out += ["", "problems:"] + [f"  {p}" for p in problems]
    return "\n".join(out)
