"""The Slurm engine: one ``sbatch`` per job (or tuning trial), one ``srun`` task per TensorFlow task.

``backend`` (``SlurmBackend``) and ``_run`` (runs a plan through
``toolkit.launcher.slurm.launch_slurm`` and reports to the store).
"""
