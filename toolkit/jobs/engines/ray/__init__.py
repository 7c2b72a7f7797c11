"""The Ray engine: a job's tasks run as Ray actors, supervised from this machine.

``backend`` (``RayBackend``) and ``_run`` (runs a plan through ``toolkit.launcher.ray.launch_ray``
and reports to the store).
"""
