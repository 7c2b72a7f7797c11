"""Renders a ``JobSpec`` as a Kubeflow ``TFJob`` and validates it like the cluster would.

The TFJob operator builds TF_CONFIG from the replica types it is given (lower-
cased: ``chief``/``master``, ``worker``, ``ps``, ``evaluator``), so choosing
``Chief`` or ``Master`` here is what honours ``useChiefInTfConfig``. The pod of
every replica runs the same container, named ``tensorflow`` with port 2222
named ``tfjob-port`` as the operator expects, and ``python -m <module> <args>``.

``pod_tf_configs`` gives the TF_CONFIG the operator sets in each pod (its
``genTFConfigJSONStr``), so what a pod will read can be checked before anything
is applied.

``validate_tfjob`` checks a manifest against the CRD's OpenAPI schema embedded
in ``schemas/tfjob-v1.json`` with strict field validation (as ``kubectl apply``
does by default), plus the rules the operator's admission webhook enforces.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import yaml

from toolkit.jobs.errors import JobSpecError, Problem, show
from toolkit.jobs.model.spec import JobSpec, ReplicaConfig
from toolkit.jobs.model.tiers import resources_for

__all__ = [
    "REPLICA_TYPES",
    "TFJOB_PORT",
    "KubernetesOptions",
    "pod_tf_configs",
    "render_tfjob",
    "schema_errors",
    "to_yaml",
    "validate_tfjob",
]

TFJOB_PORT = 2222
REPLICA_TYPES = {"chief": "Chief", "master": "Master", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("All", "Running", "None")
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class KubernetesOptions:
    """How a spec becomes a TFJob; the fields CMLE leaves to the platform.

    Attributes:
        image: container image for every replica; default: the replica's
            ``imageUri``, else ``tensorflow/tensorflow:<runtimeVersion>.0``, else
            the TensorFlow version installed here. The trainer package must be in it.
        chief_restart_policy: the chief (master) holds the training loop. ``ExitCode``
            (the default) restarts it after a preemption (exit code 143; the
            operator retries 128-255) but fails the job on a program error
            (1-127) instead of silently starting over; ``Never`` never restarts it.
        termination_grace_seconds: the pods' ``terminationGracePeriodSeconds``,
            from SIGTERM to SIGKILL; every task gets ``TFDIST_PREEMPTION_GRACE``
            5 s less to checkpoint and exit (docs/preemption.md).
        clean_pod_policy: ``None`` keeps finished pods so ``stream-logs`` still works.
        ttl_seconds_after_finished: then the operator deletes the job and its pods.
    """

    namespace: str = "default"
    image: str | None = None
    chief_restart_policy: str = "ExitCode"
    worker_restart_policy: str = "OnFailure"
    clean_pod_policy: str = "None"
    backoff_limit: int = 3
    ttl_seconds_after_finished: int | None = 86400
    image_pull_policy: str = "IfNotPresent"
    termination_grace_seconds: int = 30

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.namespace, str) or not _DNS_1123_LABEL.fullmatch(self.namespace):
            problems.append(Problem("error", "namespace", f"received {show(self.namespace)}; expected a "
                                    "Kubernetes namespace (lowercase letters, digits, '-'). Use e.g. 'default'."))
        for name in ("chief_restart_policy", "worker_restart_policy"):
            if getattr(self, name) not in RESTART_POLICIES:
                problems.append(Problem("error", name, f"received {show(getattr(self, name))}; expected one "
                                        f"of {', '.join(RESTART_POLICIES)}."))
        if self.clean_pod_policy not in CLEAN_POD_POLICIES:
            problems.append(Problem("error", "clean_pod_policy", f"received {show(self.clean_pod_policy)}; "
                                    f"expected one of {', '.join(CLEAN_POD_POLICIES)}."))
        grace = self.termination_grace_seconds
        if isinstance(grace, bool) or not isinstance(grace, int) or grace < 10:
            problems.append(Problem("error", "termination_grace_seconds", f"received {show(grace)}; expected "
                                    "whole seconds >= 10 (a preempted task needs time to checkpoint). Use e.g. 30."))
        for name in ("backoff_limit", "ttl_seconds_after_finished"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                problems.append(Problem("error", name, f"received {show(value)}; expected an integer >= 0."))
        if problems:
            raise JobSpecError(problems)


def default_image(runtime_version: str | None) -> str:
    if runtime_version:
        return f"tensorflow/tensorflow:{runtime_version}.0"
    try:
        return f"tensorflow/tensorflow:{version('tensorflow')}"
    except PackageNotFoundError:
        return "tensorflow/tensorflow:latest"


def render_tfjob(spec: JobSpec, *, name: str | None = None,
                 options: KubernetesOptions = KubernetesOptions()) -> tuple[dict[str, Any], list[str]]:
    """Returns the TFJob manifest for ``spec`` and warnings about what could not be mapped."""
    ti = spec.training_input
    name = name or spec.job_id
    if not name:
        raise JobSpecError([Problem("error", "job", "is missing; a TFJob needs a name. Pass JOB.")])
    warnings = _warnings(spec)
    replica_specs = {}
    for kind, replica in ti.replicas().items():
        policy = options.chief_restart_policy if kind in ("chief", "master") else options.worker_restart_policy
        replica_specs[REPLICA_TYPES[kind]] = {
            "replicas": replica.count, "restartPolicy": policy,
            "template": {"spec": {"terminationGracePeriodSeconds": options.termination_grace_seconds,
                                  "containers": [_container(spec, replica, options)]}},
        }
    run_policy: dict[str, Any] = {"cleanPodPolicy": options.clean_pod_policy, "backoffLimit": options.backoff_limit}
    if options.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = options.ttl_seconds_after_finished
    if ti.max_running_seconds:
        run_policy["activeDeadlineSeconds"] = ti.max_running_seconds
    manifest = {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": options.namespace,
                     "labels": {**spec.labels, "app.kubernetes.io/managed-by": "tfdist"},
                     "annotations": _annotations(spec)},
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replica_specs},
    }
    return manifest, warnings


def _container(spec: JobSpec, replica: ReplicaConfig, options: KubernetesOptions) -> dict[str, Any]:
    ti = spec.training_input
    args = list(ti.args) + (["--job-dir", ti.job_dir] if ti.job_dir else [])
    container: dict[str, Any] = {
        "name": "tensorflow",
        "image": options.image or replica.image_uri or ti.master.image_uri or default_image(ti.runtime_version),
        "imagePullPolicy": options.image_pull_policy,
        "ports": [{"name": "tfjob-port", "containerPort": TFJOB_PORT}],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "TFDIST_PREEMPTION_GRACE", "value": str(options.termination_grace_seconds - 5)}],
    }
    if ti.python_module:
        container["command"] = ["python", "-m", ti.python_module]
    if args:
        container["args"] = args
    if replica.machine_type:
        container["resources"] = resources_for(replica.machine_type, accelerator_count=replica.accelerator_count)
    return container


def _annotations(spec: JobSpec) -> dict[str, str]:
    """CMLE fields with no Kubernetes meaning, kept on the object so nothing is dropped."""
    ti = spec.training_input
    notes = {"tfdist/scale-tier": ti.scale_tier, "tfdist/region": ti.region,
             "tfdist/runtime-version": ti.runtime_version, "tfdist/python-version": ti.python_version,
             "tfdist/package-uris": json.dumps(list(ti.package_uris)) if ti.package_uris else None,
             "tfdist/recorded": json.dumps(dict(ti.recorded), sort_keys=True) if ti.recorded else None}
    return {k: v for k, v in notes.items() if v}


def _warnings(spec: JobSpec) -> list[str]:
    ti = spec.training_input
    out = []
    if ti.package_uris:
        out.append("packageUris are recorded as an annotation but not installed: the image must already "
                   "contain the trainer package.")
    if ti.package_path:
        out.append(f"packagePath {ti.package_path!r} is local; the image must already contain the package.")
    if ti.region:
        out.append(f"region {ti.region!r} is recorded as an annotation; the cluster decides where pods run.")
    if ti.job_dir and not re.match(r"[a-z][a-z0-9+.-]*://", ti.job_dir):
        out.append(f"jobDir {ti.job_dir!r} is a local path; every pod must be able to write it "
                   "(a mounted volume or a gs:// or s3:// URI).")
    return out


def pod_tf_configs(manifest: dict[str, Any], *, ends_only: bool = False) -> dict[str, str]:
    """The TF_CONFIG the TFJob operator puts in each pod, keyed by pod name.

    With ``ends_only`` only the first and last pod of each replica type: every
    pod's TF_CONFIG repeats the whole cluster, so all of them together grow with
    the square of the task count, and the pods between the ends pass or fail
    validation exactly as the ends do.

    As the operator (kubeflow.org/v1) builds it: every replica type, the
    evaluator included, is listed under its lower-cased name with one
    ``{job}-{type}-{i}.{namespace}.svc:{port}`` service per replica, the port
    being the ``tfjob-port`` of the ``tensorflow`` container (default 2222);
    the task is the pod's own, and ``environment`` is ``cloud``. A job with a
    single replica in all gets no TF_CONFIG (the operator treats it as local).

    Example:
        >>> manifest = {"metadata": {"name": "mnist", "namespace": "ml"}, "spec": {"tfReplicaSpecs": {
        ...     "Chief": {"replicas": 1}, "Worker": {"replicas": 1}}}}
        >>> pod_tf_configs(manifest)["mnist-worker-0"]
        '{"cluster": {"chief": ["mnist-chief-0.ml.svc:2222"], "worker": ["mnist-worker-0.ml.svc:2222"]}, \
"task": {"type": "worker", "index": 0}, "environment": "cloud"}'
    """
    meta, specs = manifest["metadata"], manifest["spec"]["tfReplicaSpecs"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    counts = {kind.lower(): int(spec.get("replicas", 1)) for kind, spec in specs.items()}
    if sum(counts.values()) == 1:
        return {}
    cluster = {kind: [f"{name}-{kind}-{i}.{namespace}.svc:{_port(specs[kind_])}" for i in range(counts[kind])]
               for kind_, kind in sorted(((k, k.lower()) for k in specs), key=lambda pair: pair[1])}
    return {f"{name}-{kind}-{i}": json.dumps({"cluster": cluster, "task": {"type": kind, "index": i},
                                              "environment": "cloud"})
            for kind, count in counts.items() for i in ((0, count - 1) if ends_only and count > 2 else range(count))}


def _port(replica: dict[str, Any]) -> int:
    """The operator's GetPortFromTFJob: the ``tfjob-port`` of the ``tensorflow`` container."""
    for container in replica.get("template", {}).get("spec", {}).get("containers", []):
        if container.get("name") == "tensorflow":
            for port in container.get("ports", []):
                if port.get("name") == "tfjob-port":
                    return int(port["containerPort"])
    return TFJOB_PORT


def to_yaml(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


@functools.lru_cache(maxsize=4)
def _validator(filename: str, strict: bool) -> Any:
    import jsonschema  # imported here: it is slow to import, and only validation needs it

    schema = json.loads(resources.files("toolkit.jobs").joinpath(f"schemas/{filename}").read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(_strict(schema) if strict else schema)


def schema_errors(manifest: Any, filename: str, *, strict: bool = True) -> list[str]:
    """Where ``manifest`` breaks the embedded ``schemas/<filename>``, as ``path: message``; with ``strict``
    unknown fields are errors too."""
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(_validator(filename, strict).iter_errors(manifest), key=lambda e: list(map(str, e.path)))]


def _strict(node: Any) -> Any:
    """Unknown fields become errors, as under kubectl's strict field validation."""
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
    elif isinstance(node, list):
        node = [_strict(v) for v in node]
    return node


def validate_tfjob(manifest: Any) -> list[str]:
    """Every reason the cluster would reject ``manifest``; empty when it is valid."""
    errors = schema_errors(manifest, "tfjob-v1.json")
    if errors or not isinstance(manifest, dict):
        return errors
    return _webhook_errors(manifest)


def _webhook_errors(manifest: dict[str, Any]) -> list[str]:
    errors = []
    if manifest.get("apiVersion") != "kubeflow.org/v1" or manifest.get("kind") != "TFJob":
        errors.append("apiVersion/kind: expected kubeflow.org/v1 TFJob")
    name = manifest.get("metadata", {}).get("name")
    if not isinstance(name, str) or not _DNS_1035.fullmatch(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    spec = manifest.get("spec", {})
    cleanup = spec.get("runPolicy", {}).get("cleanPodPolicy")
    if cleanup is not None and cleanup not in CLEAN_POD_POLICIES:
        errors.append(f"spec.runPolicy.cleanPodPolicy: {cleanup!r} not in {CLEAN_POD_POLICIES}")
    replicas = spec.get("tfReplicaSpecs", {})
    if "Chief" in replicas and "Master" in replicas:
        errors.append("spec.tfReplicaSpecs: Chief and Master cannot both be set")
    for kind, replica in replicas.items():
        where = f"spec.tfReplicaSpecs.{kind}"
        if kind not in REPLICA_TYPES.values():
            errors.append(f"{where}: unknown replica type (valid: {', '.join(REPLICA_TYPES.values())})")
        if kind in ("Chief", "Master", "Evaluator") and replica.get("replicas", 1) > 1:
            errors.append(f"{where}.replicas: at most 1 {kind}")
        policy = replica.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            errors.append(f"{where}.restartPolicy: {policy!r} not in {RESTART_POLICIES}")
        containers = replica.get("template", {}).get("spec", {}).get("containers", [])
        main = [c for c in containers if c.get("name") == "tensorflow"]
        if not main:
            errors.append(f"{where}: no container named 'tensorflow'")
        elif not main[0].get("image"):
            errors.append(f"{where}: the 'tensorflow' container has no image")
    return errors
