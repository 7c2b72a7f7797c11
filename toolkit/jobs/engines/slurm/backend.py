"""The Slurm backend: one ``sbatch`` per job (or per tuning trial), one ``srun`` task per TensorFlow task.

A peer of the local and Ray backends (``SupervisedBackend``): a detached
supervisor on the submit host runs ``toolkit.launcher.slurm.launch_slurm`` and
keeps the record current, each task's node and state in ``details["nodes"]``
and each Slurm job's own record in ``details["slurm"]["jobs"]`` (the accounting
``sacct`` would give, without slurmdbd).

Machine types become Slurm resources through one table (``slurm_resources``);
every task of the job's single ``srun`` step gets the largest:

==================  =========================================================
trainingInput       sbatch flags (per task)
==================  =========================================================
machine type        ``--cpus-per-task`` = the machine's vCPUs,
                    ``--mem-per-cpu`` = its memory / vCPUs,
                    ``--gres=gpu:N`` = its GPUs (``tiers.MACHINE_TYPES``;
                    Compute Engine names such as ``n1-standard-8`` computed)
acceleratorConfig   ``--gres=gpu:count`` (overrides the machine's GPUs)
no machine type     ``--cpus-per-task=1``
replica counts      ``--ntasks`` = chief + workers + ps + evaluator
maxRunningTime      ``--time`` (unless ``time_limit`` is given)
backend options     ``partition`` -> ``--partition``, ``time_limit`` ->
                    ``--time``, ``nodes`` -> ``--nodes``, ``sbatch_args``
preemption          ``--signal=TERM@<preemption_grace + 5>``,
                    ``--no-requeue`` (tfdist resubmits a preempted job)
==================  =========================================================

Everything that can be refused is refused at ``submit``, before any job
exists: Slurm's client commands missing, a job directory on local disk for a
job that may span nodes (pass ``shared_job_dir=True`` when it is mounted on
every node), and what Slurm itself rejects (``sbatch --test-only``: its own
message, with the field it came from).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from toolkit.jobs.engines.local._supervised import SupervisedBackend
from toolkit.jobs.errors import BackendError, JobSpecError, Problem
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.model.tiers import task_machine
from toolkit.jobs.storage.store import JobStore

__all__ = ["SlurmBackend", "slurm_resources"]

_log = logging.getLogger(__name__)


def slurm_resources(machine_type: str | None, *, accelerator_count: int = 0) -> dict[str, int]:
    """One task's Slurm resources on ``machine_type`` (see the module's table).

    Example:
        >>> slurm_resources("n1-standard-4")
        {'cpus_per_task': 4, 'mem_per_cpu_mib': 3840, 'gpus_per_node': 0}
    """
    cpus, memory_mib, gpus = task_machine(machine_type, accelerator_count)
    return {"cpus_per_task": cpus, "mem_per_cpu_mib": memory_mib // cpus, "gpus_per_node": gpus}


def _job_resources(spec: JobSpec) -> dict[str, Any]:
    per_type = [slurm_resources(r.machine_type, accelerator_count=r.accelerator_count)
                for r in spec.training_input.replicas().values()]
    top = {key: max(r[key] for r in per_type) for key in per_type[0]} if per_type else {}
    return {k: (v or None) if k == "mem_per_cpu_mib" else v for k, v in top.items()}


class SlurmBackend(SupervisedBackend):
    """Runs jobs on a Slurm cluster (the one ``SLURM_CONF`` or the login node points at).

    Args:
        store: the job store.
        partition, time_limit, nodes, sbatch_args: passed to ``sbatch`` (see the module's table).
        shared_job_dir: the user asserts the job's directories are mounted at the same path on every node.
        port: the tasks' base port (default: derived from the Slurm job id).
        preemption_grace: the tasks' seconds from the preemption signal to their exit; Slurm signals them
            this plus 5 s before the time limit (``--signal=TERM@30`` by default, docs/slurm.md).
    """

    name = "slurm"

    def __init__(self, store: JobStore, *, partition: str | None = None, time_limit: str | None = None,
                 nodes: int | None = None, shared_job_dir: bool = False, port: int | None = None,
                 sbatch_args: tuple[str, ...] = (), preemption_grace: int = 25, **kwargs: Any) -> None:
        super().__init__(store, **kwargs)
        self.options: dict[str, Any] = {"partition": partition, "time_limit": time_limit, "nodes": nodes,
                        "shared_dirs": shared_job_dir, "port": port, "sbatch_args": tuple(sbatch_args),
                        "preemption_grace": preemption_grace}

    def engine(self, spec: JobSpec) -> dict[str, Any]:
        """The plan runs on Slurm: the sbatch options, checked against Slurm before anything is queued."""
        from toolkit.launcher import LaunchError
        from toolkit.launcher.slurm import SlurmOptions, check_shared
        from toolkit.launcher.slurm._commands import require

        try:
            require("sbatch", "srun", "squeue", "scontrol", "scancel")
            options = SlurmOptions(**self.options, **_job_resources(spec))
        except LaunchError as exc:
            raise JobSpecError([Problem("error", exc.field, str(exc))]) from exc
        paths = [("TFDIST_HOME", str(self.store.home))]
        if spec.training_input.job_dir:
            paths.append(("trainingInput.jobDir", str((Path.cwd() / spec.training_input.job_dir).resolve())))
        for field, path in paths:
            try:
                check_shared([path], nodes=options.nodes, asserted=options.shared_dirs)
            except LaunchError as exc:
                raise JobSpecError([Problem("error", field, str(exc).replace("`job_dir` ", "", 1)
                                            .replace("(shared_dirs=True)", "(shared_job_dir=True)"))]) from exc
        self._test_only(spec, options)
        return {"name": "slurm", "options": options.to_dict()}

    def plan_warnings(self, warnings: list[str]) -> list[str]:
        """Machine types and GPUs are not ignored here: they become sbatch flags."""
        return [w for w in warnings if not w.startswith(("machine types (", "GPUs are requested", "region "))]

    def _test_only(self, spec: JobSpec, options: Any) -> None:
        """Asks Slurm whether it would take the job (``sbatch --test-only``); nothing is queued."""
        from toolkit.launcher import LaunchError
        from toolkit.launcher.slurm._commands import run
        from toolkit.launcher.slurm._launch import _refusal

        ntasks = sum(spec.training_input.task_counts.values())
        argv = ["sbatch", "--test-only", f"--ntasks={ntasks}",
                *options.sbatch_flags(timeout=spec.training_input.max_running_seconds), "--wrap=true"]
        try:
            run(argv, env=dict(os.environ))
        except LaunchError as exc:
            refusal = _refusal(str(exc).removeprefix("sbatch failed: "), options)
            raise JobSpecError([Problem("error", refusal.field, str(refusal))]) from exc

    def _stop_tasks(self, name: str) -> None:
        """A dead supervisor's job is cancelled in Slurm (its tasks run on the cluster's nodes)."""
        from toolkit.launcher.slurm._commands import scancel

        job_id = (self.store.get(name).details.get("slurm") or {}).get("job_id")
        if job_id:
            try:
                scancel(str(job_id))
            except (OSError, BackendError) as exc:
                _log.warning("cannot cancel Slurm job %s of %s: %s", job_id, name, exc)
