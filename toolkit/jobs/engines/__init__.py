"""The engines a job runs on, one subpackage each, every one behind ``toolkit.jobs.backends.Backend``.

- ``local``: processes on this machine under a detached supervisor. Its supervisor,
  plan and task runner (``_supervised``, ``supervisor``, ``_local_plan``, ``_run``) also
  supervise Ray and Slurm jobs from this machine.
- ``ray``: one Ray actor per task (``toolkit.launcher.ray``).
- ``slurm``: one ``sbatch`` per job, one ``srun`` task per TensorFlow task (``toolkit.launcher.slurm``).
- ``kubernetes``: a Kubeflow TFJob or Trainer v2 TrainJob through ``kubectl``; Katib for tuning.

Each has a ``backend`` module with its ``Backend``; the registry in ``toolkit.jobs.backends``
names them. See docs/engines.md for how to add one.
"""
