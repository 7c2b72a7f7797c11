"""The old paths of ``toolkit.jobs``'s modules, before they moved into ``model/``, ``storage/`` and
``engines/<engine>/``: each still imports, as the same module (``toolkit._moved``)."""
from toolkit._moved import moved_modules

MOVED = {
    "spec": "toolkit.jobs.model.spec",
    "_cmle": "toolkit.jobs.model._cmle",
    "_vertex": "toolkit.jobs.model._vertex",
    "_training_input": "toolkit.jobs.model._training_input",
    "_fields": "toolkit.jobs.model._fields",
    "_hygiene": "toolkit.jobs.model._hygiene",
    "tiers": "toolkit.jobs.model.tiers",
    "limits": "toolkit.jobs.model.limits",
    "names": "toolkit.jobs.model.names",
    "hyperparams": "toolkit.jobs.model.hyperparams",
    "_exec_limits": "toolkit.jobs.model._exec_limits",
    "store": "toolkit.jobs.storage.store",
    "records": "toolkit.jobs.storage.records",
    "states": "toolkit.jobs.storage.states",
    "logs": "toolkit.jobs.storage.logs",
    "local": "toolkit.jobs.engines.local.backend",
    "local_train": "toolkit.jobs.engines.local.local_train",
    "_local_plan": "toolkit.jobs.engines.local._local_plan",
    "_supervised": "toolkit.jobs.engines.local._supervised",
    "supervisor": "toolkit.jobs.engines.local.supervisor",
    "_procs": "toolkit.jobs.engines.local._procs",
    "_run": "toolkit.jobs.engines.local._run",
    "_run_parts": "toolkit.jobs.engines.local._run_parts",
    "ray_backend": "toolkit.jobs.engines.ray.backend",
    "_ray_run": "toolkit.jobs.engines.ray._run",
    "slurm_backend": "toolkit.jobs.engines.slurm.backend",
    "_slurm_run": "toolkit.jobs.engines.slurm._run",
    "kubernetes": "toolkit.jobs.engines.kubernetes.backend",
    "_kubectl": "toolkit.jobs.engines.kubernetes._kubectl",
    "tfjob": "toolkit.jobs.engines.kubernetes.tfjob",
    "trainjob": "toolkit.jobs.engines.kubernetes.trainjob",
    "katib": "toolkit.jobs.engines.kubernetes.katib",
}

__getattr__ = moved_modules("toolkit.jobs", MOVED)
