"""CMLE-style training jobs on this machine, Ray, Slurm or Kubernetes.

Write the trainer once; submit it with a CMLE job config and it runs with
TF_CONFIG set per task: as local processes supervised in the background
(``backend="local"``, the default), as Ray actors (``"ray"``), as one Slurm job
(``"slurm"``) or as a Kubeflow TFJob (``"kubernetes"``).

The folder: ``api`` (what the CLI calls), ``backends`` (the ``Backend`` protocol and
its registry), ``reader`` and ``views`` (one reading of jobs for ``describe`` and the
UI), ``errors``; ``model/`` (the job spec and its readers, limits, names, tuning
spec), ``storage/`` (the job store, records, states, logs), ``engines/<engine>/``
(one subpackage per engine) and ``tuning/`` (studies, on top of any backend).
Modules that moved there keep their old paths (``toolkit.jobs.store``, ...).

Example:
    >>> from toolkit.jobs import JobSpec, submit, describe, stream_logs   # doctest: +SKIP
    >>> spec = JobSpec.from_file("job.yaml", job_id="mnist-1",  # doctest: +SKIP
    ...                          overrides={"pythonModule": "trainer.task", "packagePath": "trainer"})
    >>> submit(spec)                      # returns at once; a supervisor runs the job  # doctest: +SKIP
    >>> stream_logs("mnist-1", sink=print).state  # doctest: +SKIP
    <JobState.SUCCEEDED: 'SUCCEEDED'>
"""
from toolkit.jobs._moved import __getattr__ as __getattr__  # first: the old module paths work from here on
from toolkit.jobs.api import BACKENDS, cancel, describe, get_backend, list_jobs, stream_logs, submit
from toolkit.jobs.backends import Backend, register_backend
from toolkit.jobs.engines.kubernetes.tfjob import KubernetesOptions, render_tfjob, validate_tfjob
from toolkit.jobs.engines.kubernetes.trainjob import render_trainjob, validate_trainjob
from toolkit.jobs.engines.local.local_train import local_train
from toolkit.jobs.errors import (
                                 BackendError,
                                 JobError,
                                 JobExistsError,
                                 JobNameError,
                                 JobNotFoundError,
                                 JobSpecError,
                                 JobStateError,
)
from toolkit.jobs.model.hyperparams import HyperparameterSpec, ParameterSpec
from toolkit.jobs.model.names import suggest_job_name, validate_job_name
from toolkit.jobs.model.spec import JobSpec, ReplicaConfig, TrainingInput
from toolkit.jobs.model.tiers import MACHINE_TYPES, SCALE_TIERS
from toolkit.jobs.storage.records import JobRecord, StateChange, TaskRecord
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.storage.store import JobStore, default_home

__all__ = [
    "BACKENDS", "Backend", "BackendError", "HyperparameterSpec", "JobError", "JobExistsError", "JobNameError",
    "JobNotFoundError", "JobRecord", "JobSpec", "JobSpecError", "JobState", "JobStateError", "JobStore",
    "KubernetesOptions", "MACHINE_TYPES", "ParameterSpec", "ReplicaConfig", "SCALE_TIERS", "StateChange",
    "TaskRecord", "TrainingInput", "cancel", "default_home", "describe", "get_backend", "list_jobs",
    "local_train", "register_backend", "render_tfjob", "render_trainjob", "stream_logs", "submit",
    "suggest_job_name", "validate_job_name", "validate_tfjob", "validate_trainjob",
]
