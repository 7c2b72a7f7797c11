"""Kubeflow Trainer v2: a spec as a ``trainer.kubeflow.org/v1alpha1`` TrainJob and its ClusterTrainingRuntime.

Trainer v2 runs one generic pod per node (a JobSet of Indexed Jobs) and leaves
TF_CONFIG to the user (kubeflow/trainer#2699). Here every pod runs the same
command, ``tfdist run``, which derives its TF_CONFIG from the pod's environment
(``tf_config.from_env``: ``JOB_COMPLETION_INDEX``, the pod's stable hostname
``<job>-node-0-<i>`` under the JobSet's subdomain ``<job>``, and the task count
``TFDIST_NUM_TASKS`` set by the TrainJob) and the job's layout (chief, workers,
ps, evaluator: in that rank order). One ClusterTrainingRuntime,
``tfdist-tensorflow``, serves every job; apply it once per cluster. The image
must contain tfdist and the trainer package.

Both manifests are checked against the CRDs' schemas embedded in
``schemas/`` (pruned as ``tools/extract_trainer_schema.py`` says), with unknown fields
refused as ``kubectl apply`` does. The CRDs' CEL rules are not evaluated.

Example:
    >>> from toolkit.jobs import JobSpec
    >>> spec = JobSpec.from_dict({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "standard",
    ...     "workerType": "standard", "workerCount": 2, "parameterServerType": "standard",
    ...     "parameterServerCount": 1, "pythonModule": "trainer.task", "useChiefInTfConfig": True}}, job_id="mnist")
    >>> job, runtime, _ = render_trainjob(spec)
    >>> job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]["command"][:6]
    (4, ['tfdist', 'run', '--kind', 'kubernetes', '--layout', 'ps=1,chief=1,evaluator=0'])
    >>> validate_trainjob(job), validate_runtime(runtime)
    ([], [])
"""
from __future__ import annotations

from typing import Any

from toolkit.jobs.engines.kubernetes.tfjob import (
    _DNS_1035,
    TFJOB_PORT,
    KubernetesOptions,
    _warnings,
    default_image,
    schema_errors,
    to_yaml,
)
from toolkit.jobs.errors import JobSpecError, Problem, refuse_invalid
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.model.tiers import machine_for, resources_for

__all__ = ["RUNTIME_NAME", "render_runtime", "render_trainjob", "trainjob_yaml", "validate_runtime",
           "validate_trainjob"]

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_NAME = "tfdist-tensorflow"
_MANAGED = {"app.kubernetes.io/managed-by": "tfdist"}


def render_runtime(*, image: str | None = None) -> dict[str, Any]:
    """The ClusterTrainingRuntime every tfdist TrainJob refers to: one Indexed Job of ``node`` pods with DNS names."""
    container = {"name": "node", "image": image or default_image(None),
                 "ports": [{"name": "tfjob-port", "containerPort": TFJOB_PORT}]}
    return {
        "apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME_NAME, "labels": {**_MANAGED, "trainer.kubeflow.org/framework": "tensorflow"}},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {"spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [container]}}},
                    },
                }],
            }},
        },
    }


def _largest_machine(spec: JobSpec) -> tuple[str | None, int]:
    replicas = [r for r in spec.training_input.replicas().values() if r.machine_type]
    if not replicas:
        return None, 0
    best = max(replicas, key=lambda r: (machine_for(r.machine_type or "") or _NONE).cpus)
    return best.machine_type, best.accelerator_count


class _NoMachine:
    cpus = 0


_NONE = _NoMachine()


def render_trainjob(spec: JobSpec, *, name: str | None = None, options: KubernetesOptions | None = None
                    ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(the TrainJob, the ClusterTrainingRuntime it needs, warnings about what could not be mapped)."""
    options = options or KubernetesOptions()
    ti = spec.training_input
    name = name or spec.job_id
    if not name:
        raise JobSpecError([Problem("error", "job", "is missing; a TrainJob needs a name. Pass JOB.")])
    if ti.python_module is None:
        raise JobSpecError([Problem("error", "trainingInput.pythonModule", "is missing; every TrainJob pod runs "
                                    "`python -m MODULE` under `tfdist run`. Set pythonModule.")])
    counts = ti.task_counts
    tasks = sum(counts.values())
    layout = f"ps={counts.get('ps', 0)},chief=1,evaluator={counts.get('evaluator', 0)}"
    dialect = "tf" if ti.primary_task_type == "chief" else "cmle"
    command = ["tfdist", "run", "--kind", "kubernetes", "--layout", layout, "--dialect", dialect, "--",
               "python", "-m", ti.python_module]
    trainer: dict[str, Any] = {
        "image": options.image or ti.master.image_uri or default_image(ti.runtime_version),
        "command": command,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "TFDIST_NUM_TASKS", "value": str(tasks)},
                {"name": "TFDIST_SUBDOMAIN", "value": name}],
        "numNodes": tasks,
    }
    args = list(ti.args) + (["--job-dir", ti.job_dir] if ti.job_dir else [])
    if args:
        trainer["args"] = args
    machine, gpus = _largest_machine(spec)
    warnings = _warnings(spec)
    if machine:
        trainer["resourcesPerNode"] = resources_for(machine, accelerator_count=gpus)
        if len({r.machine_type for r in ti.replicas().values()}) > 1:
            warnings.append(f"every pod gets the largest machine type ({machine}): a TrainJob has one pod shape.")
    job: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "TrainJob",
        "metadata": {"name": name, "namespace": options.namespace, "labels": {**spec.labels, **_MANAGED}},
        "spec": {"runtimeRef": {"name": RUNTIME_NAME, "kind": "ClusterTrainingRuntime",
                                "apiGroup": "trainer.kubeflow.org"}, "trainer": trainer},
    }
    if ti.max_running_seconds:
        job["spec"]["activeDeadlineSeconds"] = ti.max_running_seconds
    return job, render_runtime(image=options.image), warnings


def trainjob_yaml(spec: JobSpec, *, options: KubernetesOptions | None = None) -> tuple[str, list[str]]:
    """Both manifests as one YAML stream (runtime first), validated; warnings about the mapping."""
    job, runtime, warnings = render_trainjob(spec, options=options)
    refuse_invalid("the rendered TrainJob does not validate against the CRD schemas",
                   validate_runtime(runtime) + validate_trainjob(job))
    return to_yaml(runtime) + "---\n" + to_yaml(job), warnings


def _errors(manifest: Any, filename: str, kind: str) -> list[str]:
    errors = schema_errors(manifest, filename)
    if errors or not isinstance(manifest, dict):
        return errors
    if manifest.get("apiVersion") != API_VERSION or manifest.get("kind") != kind:
        errors.append(f"apiVersion/kind: expected {API_VERSION} {kind}")
    name = manifest.get("metadata", {}).get("name")
    if not isinstance(name, str) or not _DNS_1035.fullmatch(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    return errors


def validate_trainjob(manifest: Any) -> list[str]:
    """Every reason the cluster would reject the TrainJob; empty when it is valid."""
    return _errors(manifest, "trainjob-v1alpha1.json", "TrainJob")


def validate_runtime(manifest: Any) -> list[str]:
    """Every reason the cluster would reject the ClusterTrainingRuntime; empty when it is valid."""
    return _errors(manifest, "clustertrainingruntime-v1alpha1.json", "ClusterTrainingRuntime")
