"""Scale tiers and machine types: CMLE's vocabulary, mapped onto tasks and resources.

A scale tier fixes how many tasks of each kind a job has; a machine type fixes
what each task may use. Locally every task is a process on this machine, so
machine types only matter to the Kubernetes backend, which turns them into
container resource requests (see ``resources_for``).

Scale tiers (counts as documented by CMLE; the master is always 1):

=========== ======= ==== ========== ================
tier        workers  ps  evaluators master machine
=========== ======= ==== ========== ================
BASIC          0      0      0      standard
BASIC_GPU      0      0      0      standard_gpu
STANDARD_1     4      3      0      standard
PREMIUM_1     19     11      0      large_model
CUSTOM      (workerCount, parameterServerCount, evaluatorCount, masterType)
=========== ======= ==== ========== ================
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ScaleTier", "SCALE_TIERS", "Machine", "MACHINE_TYPES", "machine_for", "resources_for", "task_machine"]


@dataclass(frozen=True)
class ScaleTier:
    """Task counts and machine types a predefined tier implies."""

    workers: int
    parameter_servers: int
    evaluators: int
    master_type: str
    worker_type: str | None = None
    parameter_server_type: str | None = None


SCALE_TIERS: dict[str, ScaleTier | None] = {
    "BASIC": ScaleTier(0, 0, 0, "standard"),
    "BASIC_GPU": ScaleTier(0, 0, 0, "standard_gpu"),
    "STANDARD_1": ScaleTier(4, 3, 0, "standard", "standard", "standard"),
    "PREMIUM_1": ScaleTier(19, 11, 0, "large_model", "large_model", "large_model"),
    "CUSTOM": None,  # counts and machine types come from the trainingInput fields
}


@dataclass(frozen=True)
class Machine:
    """What one task may use: vCPUs, memory in MiB, GPUs and their kind."""

    cpus: int
    memory_mib: int
    gpus: int = 0
    accelerator: str | None = None


# Compute Engine names: n1-standard-8, e2-highmem-16, n2-highcpu-32, ...
_GCE_NAME = re.compile(r"(n1|n2|e2)-(standard|highmem|highcpu)-(2|4|8|16|32|64|96)")
_GIB_PER_CPU = {"n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
                "n2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
                "e2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0}}


def _gce(kind: str, cpus: int, gpus: int = 0, accelerator: str | None = None, *,
         family: str = "n1") -> Machine:
    return Machine(cpus, int(cpus * _GIB_PER_CPU[family][kind] * 1024), gpus, accelerator)


# CMLE's legacy machine names and the Compute Engine machines behind them.
MACHINE_TYPES: dict[str, Machine] = {
    "standard": _gce("standard", 4),
    "large_model": _gce("highmem", 8),
    "complex_model_s": _gce("highcpu", 8),
    "complex_model_m": _gce("highcpu", 16),
    "complex_model_l": _gce("highcpu", 32),
    "standard_gpu": _gce("standard", 8, 1, "NVIDIA_TESLA_K80"),
    "complex_model_m_gpu": _gce("standard", 16, 4, "NVIDIA_TESLA_K80"),
    "complex_model_l_gpu": _gce("standard", 32, 8, "NVIDIA_TESLA_K80"),
    "standard_p100": _gce("standard", 8, 1, "NVIDIA_TESLA_P100"),
    "complex_model_m_p100": _gce("standard", 16, 4, "NVIDIA_TESLA_P100"),
    "standard_v100": _gce("standard", 8, 1, "NVIDIA_TESLA_V100"),
    "large_model_v100": _gce("highmem", 8, 1, "NVIDIA_TESLA_V100"),
    "complex_model_m_v100": _gce("standard", 16, 4, "NVIDIA_TESLA_V100"),
    "complex_model_l_v100": _gce("standard", 32, 8, "NVIDIA_TESLA_V100"),
}
MACHINE_TYPE_HELP = (f"{', '.join(MACHINE_TYPES)}, or a Compute Engine type FAMILY-KIND-N "
                     "(FAMILY n1, n2 or e2; KIND standard, highmem or highcpu; N in 2, 4, 8, 16, 32, 64, 96)")


def machine_for(name: str) -> Machine | None:
    """The machine behind a CMLE or Compute Engine machine type name, or None if unknown."""
    if name in MACHINE_TYPES:
        return MACHINE_TYPES[name]
    match = _GCE_NAME.fullmatch(name)
    return _gce(match.group(2), int(match.group(3)), family=match.group(1)) if match else None


def task_machine(machine_type: str | None, accelerator_count: int = 0) -> tuple[int, int, int]:
    """One task's (vCPUs, memory MiB, GPUs): its machine's, or 1 vCPU and no memory without one; an
    ``accelerator_count`` replaces the machine's GPUs, as CMLE's ``acceleratorConfig`` does."""
    machine = machine_for(machine_type) if machine_type else None
    cpus, memory_mib, gpus = (machine.cpus, machine.memory_mib, machine.gpus) if machine else (1, 0, 0)
    return cpus, memory_mib, accelerator_count or gpus


def resources_for(name: str, *, accelerator_count: int = 0) -> dict[str, dict[str, str]]:
    """Kubernetes container resources for a machine type.

    CPU and memory become requests (the scheduler reserves them, the task may
    burst); GPUs become ``nvidia.com/gpu`` limits, which Kubernetes requires for
    extended resources. ``accelerator_count`` adds GPUs to a Compute Engine type,
    as CMLE's ``acceleratorConfig`` does.

    Example:
        >>> resources_for("n1-standard-4")
        {'requests': {'cpu': '4', 'memory': '15360Mi'}}
    """
    machine = machine_for(name)
    if machine is None:
        raise ValueError(f"unknown machine type {name!r}; expected {MACHINE_TYPE_HELP}")
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": str(machine.cpus), "memory": f"{machine.memory_mib}Mi"}}
    gpus = machine.gpus + accelerator_count
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return resources
