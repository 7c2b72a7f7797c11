"""The local engine: a job's tasks run as processes on this machine, under a detached supervisor.

``backend`` (``LocalBackend``), ``_supervised`` (the submit/describe/cancel base the Ray and
Slurm backends share), ``supervisor`` (``python -m toolkit.jobs.engines.local.supervisor``,
the process that runs one job to its end), ``_local_plan`` (a spec as argv, counts and
paths), ``_run`` and ``_run_parts`` (the task runner and what every engine's runner shares),
``_procs`` (process identity) and ``local_train`` (``tfdist local train``).
"""
