"""The Slurm launcher: the same job as ``toolkit.launcher.launch``, as one Slurm job.

``launch_slurm`` submits one ``sbatch`` whose single ``srun`` step starts every
task; each task derives its TF_CONFIG from Slurm's variables
(``tf_config.from_env``: ranks in order chief, workers, ps, evaluator; ports
``15000 + 32 * (job id % 1000)`` plus the task's slot on its node, unless
``port`` is set). The failure policy, exit codes, ``[worker-1]`` prefixes and
per-task logs are the local launcher's. The job's directory must be on storage
every node sees (checked, see ``_shared``).

Example:
    >>> from toolkit.launcher import LaunchSpec                              # doctest: +SKIP
    >>> from toolkit.launcher.slurm import SlurmOptions, launch_slurm        # doctest: +SKIP
    >>> result = launch_slurm(LaunchSpec(cmd=("python", "train.py"), workers=2, ps=1),  # doctest: +SKIP
    ...                       job_dir="/shared/runs/a", options=SlurmOptions(partition="gpu", time_limit="1:00:00"))
    >>> result.exit_code  # doctest: +SKIP
    0
"""
from __future__ import annotations

from toolkit.launcher.slurm._launch import launch_slurm
from toolkit.launcher.slurm._options import SlurmOptions
from toolkit.launcher.slurm._shared import SHARED_FILESYSTEMS, check_shared, filesystem_of

__all__ = ["SHARED_FILESYSTEMS", "SlurmOptions", "check_shared", "filesystem_of", "launch_slurm"]
