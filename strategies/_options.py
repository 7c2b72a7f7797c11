"""Validated strategy options: checked in pure Python before TensorFlow loads.

The options are checked eagerly so that a typo in a partitioner argument fails
in milliseconds on the launching machine, not after every task of a cluster
has paid the TensorFlow import and connected to its peers.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from strategies._errors import StrategyError
from tf_config.checks import check_int, check_number

COMMUNICATIONS = ("auto", "ring", "nccl")
CROSS_DEVICE_OPS = ("nccl", "hierarchical_copy", "reduce_to_one")

# partitioner name -> (required parameters, optional parameters); the names are
# those of tf.distribute.experimental.partitioners.*Partitioner.__init__.
PARTITIONERS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    "min_size": ((), ("min_shard_bytes", "max_shards", "bytes_per_string")),
    "max_size": (("max_shard_bytes",), ("max_shards", "bytes_per_string")),
    "fixed_shards": (("num_shards",), ()),
})

# option -> strategies it means something to
APPLIES_TO: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "communication": ("multi_worker_mirrored",),
    "timeout_seconds": ("multi_worker_mirrored",),
    "devices": ("mirrored", "one_device"),
    "cross_device_ops": ("mirrored",),
    "partitioner": ("parameter_server",),
    "partitioner_args": ("parameter_server",),
})


def _choice(name: str, value: object, valid: tuple[str, ...] | Mapping[str, Any]) -> None:
    if value is not None and value not in valid:
        raise StrategyError(
            f"Strategy option `{name}` is {value!r}; expected one of {', '.join(sorted(valid))}. "
            f"Pick one of those names (or leave it unset).", field=name
        )


def _positive_int(name: str, value: object) -> None:
    check_int(value, field=name, optional=True, error=StrategyError, owner="Strategy option", example=2)


def _positive_seconds(name: str, value: object) -> None:
    check_number(value, field=name, optional=True, error=StrategyError, owner="Strategy option", unit="seconds",
                 example=60)


@dataclass(frozen=True)
class StrategyOptions:
    """Options of ``make_strategy``; each applies to some strategies only.

    Attributes:
        communication: MultiWorkerMirrored collective implementation,
            ``auto``, ``ring`` or ``nccl`` (None means ``auto``).
        timeout_seconds: MultiWorkerMirrored collective timeout; a peer that
            stops answering fails the step after this long instead of hanging.
        devices: Mirrored replicas (or the single OneDevice device), e.g.
            ``("/cpu:0", "/cpu:1")``. None means every local GPU, or every
            logical CPU when ``logical_cpus`` is set.
        cross_device_ops: Mirrored reduction, ``nccl``, ``hierarchical_copy``
            or ``reduce_to_one``.
        partitioner: ParameterServer variable partitioner, ``min_size``,
            ``max_size`` or ``fixed_shards``.
        partitioner_args: that partitioner's parameters, e.g.
            ``{"num_shards": 2}``.
        logical_cpus: split the local CPU into this many logical devices first
            (see ``configure_local_devices``), so multi-device strategies run
            on a CPU-only machine.
        connect_timeout: ParameterServer: seconds to wait for every ps and
            worker to listen; TensorFlow itself would wait forever.
    """

    communication: str | None = None
    timeout_seconds: float | None = None
    devices: Sequence[str] | None = None  # a tuple once checked
    cross_device_ops: str | None = None
    partitioner: str | None = None
    partitioner_args: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    logical_cpus: int | None = None
    connect_timeout: float = 300.0

    def __post_init__(self) -> None:
        _choice("communication", self.communication, COMMUNICATIONS)
        _choice("cross_device_ops", self.cross_device_ops, CROSS_DEVICE_OPS)
        _choice("partitioner", self.partitioner, PARTITIONERS)
        _positive_int("logical_cpus", self.logical_cpus)
        _positive_seconds("timeout_seconds", self.timeout_seconds)
        _positive_seconds("connect_timeout", self.connect_timeout)
        self._check_devices()
        object.__setattr__(self, "partitioner_args", MappingProxyType(dict(self.partitioner_args or {})))
        self._check_partitioner_args()

    def _check_devices(self) -> None:
        if self.devices is None:
            return
        if isinstance(self.devices, str) or not all(isinstance(d, str) and d for d in self.devices):
            raise StrategyError(
                f"Strategy option `devices` is {self.devices!r}; expected a list of device names. "
                'Pass e.g. devices=["/cpu:0", "/cpu:1"].', field="devices"
            )
        object.__setattr__(self, "devices", tuple(self.devices))

    def _check_partitioner_args(self) -> None:
        args = self.partitioner_args
        if self.partitioner is None:
            if args:
                raise StrategyError(
                    f"Strategy option `partitioner_args` is {dict(args)!r} but `partitioner` is unset. "
                    f"Set partitioner to one of {', '.join(PARTITIONERS)}.", field="partitioner_args"
                )
            return
        required, optional = PARTITIONERS[self.partitioner]
        for key in args:
            if key not in required + optional:
                raise StrategyError(
                    f"Partitioner {self.partitioner!r} has no parameter `{key}` (received {key}={args[key]!r}); "
                    f"valid parameters: {', '.join(required + optional)}.", field=f"partitioner_args.{key}"
                )
            _positive_int(f"partitioner_args.{key}", args[key])
        for key in required:
            if key not in args:
                raise StrategyError(
                    f"Partitioner {self.partitioner!r} needs `{key}`; received {dict(args)!r}. "
                    f"Pass partitioner_args={{{key!r}: ...}}.", field=f"partitioner_args.{key}"
                )

    def check_applies(self, strategy: str) -> list[str]:
        """Options set by the caller (to a non-default value) that the given strategy would ignore."""
        given = {
            "communication": self.communication not in (None, "auto"),
            "timeout_seconds": self.timeout_seconds is not None,
            "devices": self.devices is not None,
            "cross_device_ops": self.cross_device_ops is not None,
            "partitioner": self.partitioner is not None,
            "partitioner_args": bool(self.partitioner_args),
        }
        return [name for name, is_set in given.items() if is_set and strategy not in APPLIES_TO[name]]
