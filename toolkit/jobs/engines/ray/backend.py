"""The Ray backend: a job's tasks run as Ray actors on a Ray cluster of any size.

Everything about a job's life is ``SupervisedBackend``'s, as for its peers the
local and Slurm backends; only the tasks move: the supervisor is the Ray driver
(``toolkit.launcher.ray.launch_ray``, one actor per task). Their output comes
back to ``<job dir>/logs/<task>.log`` here, so ``stream-logs`` reads files as
for a local job, and each task's Ray node goes to ``details["nodes"]``.

Machine types become Ray resources through one table (``ray_resources``):

==================  =========================================================
trainingInput       Ray resources of each task's actor (its bundle)
==================  =========================================================
machine type        ``CPU`` = the machine's vCPUs, ``memory`` = its memory,
                    ``GPU`` = its GPUs (``tiers.MACHINE_TYPES``; Compute
                    Engine names such as ``n1-standard-8`` are computed)
acceleratorConfig   ``GPU`` = ``count`` (overrides the machine's GPUs)
no machine type     ``CPU`` = 1
replica counts      one actor (one bundle) per task
==================  =========================================================

A scale tier implies its machine types (BASIC: one ``standard``, 4 vCPUs and
15 GiB), so the cluster must have that room: ask for smaller machines, or use
``scaleTier: CUSTOM`` with the types that fit your nodes.
"""
from __future__ import annotations

from typing import Any

from toolkit.jobs.engines.local._supervised import SupervisedBackend
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.model.tiers import task_machine
from toolkit.jobs.storage.store import JobStore

__all__ = ["RayBackend", "ray_resources"]

_MIB = 1024 * 1024


def ray_resources(machine_type: str | None, *, accelerator_count: int = 0) -> dict[str, float]:
    """The Ray resources of one task on ``machine_type`` (see the module's table)."""
    cpus, memory_mib, gpus = task_machine(machine_type, accelerator_count)
    resources = {"CPU": float(cpus), "memory": float(memory_mib * _MIB), "GPU": float(gpus)}
    return {k: v for k, v in resources.items() if v}


def _task_resources(spec: JobSpec) -> dict[str, dict[str, float]]:
    ti = spec.training_input
    by_type = {}
    for kind, replica in ti.replicas().items():
        task_type = "chief" if kind in ("master", "chief") else kind
        by_type[task_type] = ray_resources(replica.machine_type, accelerator_count=replica.accelerator_count)
    return by_type


class RayBackend(SupervisedBackend):
    """Runs jobs on a Ray cluster; records live in ``store`` as for local jobs.

    Args:
        store: the job store.
        address: the Ray cluster; None reads ``RAY_ADDRESS`` (at submit time).
        placement: placement-group strategy (``toolkit.launcher.ray.PLACEMENTS``).
        shared_job_dir: the user asserts a local ``jobDir`` is mounted at the
            same path on every node.
    """

    name = "ray"

    def __init__(self, store: JobStore, *, address: str | None = None, placement: str = "auto",
                 shared_job_dir: bool = False, **kwargs: Any) -> None:
        super().__init__(store, **kwargs)
        self.address, self.placement, self.shared_job_dir = address, placement, shared_job_dir

    def engine(self, spec: JobSpec) -> dict[str, Any]:
        """The plan runs on Ray: its options (address, placement, resources) go with it."""
        from toolkit.jobs.errors import JobSpecError, Problem
        from toolkit.launcher import LaunchError
        from toolkit.launcher.ray import RayOptions
        try:
            options = RayOptions.from_env(address=self.address, placement=self.placement,
                                          resources=_task_resources(spec), shared_dirs=self.shared_job_dir)
        except LaunchError as exc:
            raise JobSpecError([Problem("error", f"--{exc.field.replace('_', '-')}", str(exc))]) from exc
        return {"name": "ray", "options": options.to_dict()}
