"""One transfer per parameter server and step, instead of one per variable.

Under ParameterServerStrategy a step on a worker reads every trainable
variable from its ps and sends every gradient back. TensorFlow moves each
tensor between tasks as its own RPC, so a model with *n* variables costs 2*n
round trips a step, and on a small model those round trips, not the maths, set
the pace. ``RemotePacking``
concatenates the variables of each ps into one flat tensor *on that ps*, splits
it on the worker, and sends the gradients back the same way: two transfers per
ps and step, whatever the number of variables.

The forward pass reads the fetched values through ``keras.StatelessScope``, so
any ``Forward`` (any ``model(x)`` call) uses them unchanged; what the forward
pass assigns (dropout seed state, batch-norm statistics) is written back to the
variables afterwards. The update itself is the optimizer's, as before, placed
on the ps next to its variables: same gradients, same update, same result.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

__all__ = ["RemotePacking"]

logger = logging.getLogger(__name__)

#: one dense variable on one device: what ParameterServerStrategy makes with one replica per worker
#: (its CachingVariable wraps a ResourceVariable and caches nothing unless asked to)
_PLAIN = frozenset({"ResourceVariable", "UninitializedVariable", "CachingVariable"})


def _device(variable: Any) -> str | None:
    if not isinstance(variable, keras.Variable):
        return None  # e.g. a sharded table's shards: StatelessScope maps Keras variables only
    inner = variable.value
    if type(inner).__name__ not in _PLAIN:
        return None  # sharded, mirrored or aggregating variables keep their own transfer logic
    return inner.device or None


class RemotePacking:
    """Packs the reads and gradients of ``variables`` per parameter-server device.

    Build it inside the traced step with ``RemotePacking.of(variables)``; it is
    None when there is nothing to gain (not under parameter servers, or a
    variable that is not a plain dense one on a ps).
    """

    def __init__(self, variables: Sequence[Any], devices: Sequence[str]) -> None:
        self.variables = list(variables)
        self.groups: dict[str, list[int]] = {}
        for index, device in enumerate(devices):
            self.groups.setdefault(device, []).append(index)

    @classmethod
    def of(cls, variables: Sequence[Any]) -> RemotePacking | None:
        if not isinstance(tf.distribute.get_strategy(), tf.distribute.ParameterServerStrategy):
            return None
        devices = [_device(variable) for variable in variables]
        if not devices or any(device is None or "/job:ps" not in device for device in devices):
            return None
        packing = cls(variables, [device for device in devices if device is not None])
        logger.info("train step: %d variables read and updated with one transfer per ps (%d ps)", len(variables),
                    len(packing.groups))
        return packing

    def _shapes(self, indices: Sequence[int]) -> tuple[list[Any], list[int]]:
        shapes = [self.variables[i].shape for i in indices]
        return shapes, [int(np.prod(shape)) for shape in shapes]

    def fetch(self) -> list[tf.Tensor]:
        """The variables' current values, one transfer per ps."""
        values: list[Any] = [None] * len(self.variables)
        for device, indices in self.groups.items():
            shapes, sizes = self._shapes(indices)
            with tf.device(device):
                flat = tf.concat([tf.reshape(self.variables[i].value, [-1]) for i in indices], axis=0)
            for i, part, shape in zip(indices, tf.split(flat, sizes), shapes, strict=True):
                values[i] = tf.reshape(part, shape)
        return values

    def ship(self, gradients: Sequence[Any]) -> list[Any]:
        """``gradients`` (of the fetched values) moved to their variables' ps, one transfer per ps.

        None gradients stay None, and sparse ones (``IndexedSlices``) travel on their own.
        """
        shipped = list(gradients)
        for device, indices in self.groups.items():
            dense = [i for i in indices if isinstance(gradients[i], tf.Tensor)]
            if not dense:
                continue
            shapes, sizes = self._shapes(dense)
            flat = tf.concat([tf.reshape(gradients[i], [-1]) for i in dense], axis=0)
            with tf.device(device):
                for i, part, shape in zip(dense, tf.split(flat, sizes), shapes, strict=True):
                    shipped[i] = tf.reshape(part, shape)
        return shipped

    def scope(self, values: Sequence[tf.Tensor]) -> keras.StatelessScope:
        """A scope in which reads of the variables return ``values`` (losses collected as usual)."""
        return keras.StatelessScope(state_mapping=list(zip(self.variables, values, strict=True)),
                                    collect_losses=True)

    @staticmethod
    def write_back(scope: keras.StatelessScope, model: keras.Model) -> list[Any]:
        """Assigns what the forward pass updated inside ``scope`` (seed states, moving statistics)."""
        return [variable.assign(value) for variable in model.non_trainable_variables
                for value in [scope.get_current_value(variable)] if value is not None]
