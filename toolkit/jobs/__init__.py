"""CMLE-style training jobs on this machine or on Kubernetes.

Write the trainer once; submit it with a CMLE job config and it runs with
TF_CONFIG set per task, either as local processes supervised in the background
(``backend="local"``, the default) or as a Kubeflow TFJob (``"kubernetes"``).

Example:
    >>> from toolkit.jobs import JobSpec, submit, describe, stream_logs   # doctest: +SKIP
    >>> spec = JobSpec.from_file("job.yaml", job_id="mnist-1",  # doctest: +SKIP
    ...                          overrides={"pythonModule": "trainer.task", "packagePath": "trainer"})
    >>> submit(spec)                      # returns at once; a supervisor runs the job  # doctest: +SKIP
    >>> stream_logs("mnist-1", sink=print).state  # doctest: +SKIP
    <JobState.SUCCEEDED: 'SUCCEEDED'>
"""
from toolkit.jobs.api import BACKENDS, cancel, describe, get_backend, list_jobs, stream_logs, submit
from toolkit.jobs.backends import Backend, register_backend
from toolkit.jobs.errors import (
                                 BackendError,
                                 JobError,
                                 JobExistsError,
                                 JobNameError,
                                 JobNotFoundError,
                                 JobSpecError,
                                 JobStateError,
)
from toolkit.jobs.hyperparams import HyperparameterSpec, ParameterSpec
from toolkit.jobs.local_train import local_train
from toolkit.jobs.names import suggest_job_name, validate_job_name
from toolkit.jobs.records import JobRecord, StateChange, TaskRecord
from toolkit.jobs.spec import JobSpec, ReplicaConfig, TrainingInput
from toolkit.jobs.states import JobState
from toolkit.jobs.store import JobStore, default_home
from toolkit.jobs.tfjob import KubernetesOptions, render_tfjob, validate_tfjob
from toolkit.jobs.tiers import MACHINE_TYPES, SCALE_TIERS
from toolkit.jobs.trainjob import render_trainjob, validate_trainjob

__all__ = [
    "BACKENDS", "Backend", "BackendError", "HyperparameterSpec", "JobError", "JobExistsError", "JobNameError",
    "JobNotFoundError", "JobRecord", "JobSpec", "JobSpecError", "JobState", "JobStateError", "JobStore",
    "KubernetesOptions", "MACHINE_TYPES", "ParameterSpec", "ReplicaConfig", "SCALE_TIERS", "StateChange",
    "TaskRecord", "TrainingInput", "cancel", "default_home", "describe", "get_backend", "list_jobs",
    "local_train", "register_backend", "render_tfjob", "render_trainjob", "stream_logs", "submit",
    "suggest_job_name", "validate_job_name", "validate_tfjob", "validate_trainjob",
]
