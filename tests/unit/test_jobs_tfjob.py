"""TFJob rendering, checked against the TFJob CRD's OpenAPI schema with jsonschema."""
from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import pytest
import yaml

from toolkit.jobs import JobSpec, JobSpecError, KubernetesOptions, render_tfjob, validate_tfjob
from toolkit.jobs.engines.kubernetes.tfjob import to_yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
SPECS = {
    "basic": {"trainingInput": {"pythonModule": "trainer.task"}},
    "standard_1": {"trainingInput": {"scaleTier": "STANDARD_1", "pythonModule": "trainer.task",
                                     "args": ["--steps", 10], "jobDir": "gs://b/out"}},
    "premium_1": {"trainingInput": {"scaleTier": "PREMIUM_1", "pythonModule": "trainer.task"}},
    "basic_gpu": {"trainingInput": {"scaleTier": "BASIC_GPU", "pythonModule": "trainer.task"}},
    "custom": (FIXTURES / "cmle_custom.yaml"),
    "gpu_evaluator": (FIXTURES / "cmle_gpu.yaml"),
    "vertex": (FIXTURES / "vertex.yaml"),
}


def _spec(key: str) -> JobSpec:
    source = SPECS[key]
    if isinstance(source, Path):
        return JobSpec.from_file(source, job_id=f"job-{key.replace('_', '-')}")
    return JobSpec.from_dict(source, job_id=f"job-{key.replace('_', '-')}")


@pytest.mark.parametrize("key", sorted(SPECS))
def test_every_rendered_manifest_validates_against_the_crd_schema(key):
    manifest, _ = render_tfjob(_spec(key))
    assert validate_tfjob(manifest) == []
    assert validate_tfjob(yaml.safe_load(to_yaml(manifest))) == []  # what kubectl receives


def test_replicas_restart_policies_container_and_port():
    manifest, _ = render_tfjob(_spec("custom"))
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert {k: (v["replicas"], v["restartPolicy"]) for k, v in replicas.items()} == {
        "Master": (1, "ExitCode"), "Worker": (2, "OnFailure"), "PS": (1, "OnFailure")}  # a preempted master: 143
    assert {v["template"]["spec"]["terminationGracePeriodSeconds"] for v in replicas.values()} == {30}
    (container,) = replicas["Worker"]["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert container["command"] == ["python", "-m", "trainer.task"]
    assert container["args"] == ["--train-steps", "200"]
    assert container["image"] == "tensorflow/tensorflow:2.21.0"  # from runtimeVersion
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "30720Mi"}}
    assert replicas["PS"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] == "53248Mi"
    assert manifest["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 3,
                                             "ttlSecondsAfterFinished": 86400, "activeDeadlineSeconds": 7200}
    assert manifest["metadata"]["labels"] == {"team": "research", "app.kubernetes.io/managed-by": "tfdist"}
    assert manifest["metadata"]["annotations"]["tfdist/region"] == "us-central1"


def test_chief_evaluator_gpus_images_and_job_dir():
    manifest, warnings = render_tfjob(_spec("gpu_evaluator"))
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert set(replicas) == {"Chief", "Worker", "Evaluator"}  # useChiefInTfConfig -> Chief
    chief = replicas["Chief"]["template"]["spec"]["containers"][0]
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert chief["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": "2"}  # acceleratorConfig adds GPUs
    assert chief["image"] == worker["image"] == "registry.example.com/trainer:1"
    assert chief["args"] == ["--job-dir", "gs://bucket/out"]
    assert warnings == []


def test_options_and_unmapped_fields_become_warnings_not_silence():
    options = KubernetesOptions(namespace="ml", image="me/trainer:2", chief_restart_policy="OnFailure",
                                ttl_seconds_after_finished=None)
    manifest, warnings = render_tfjob(_spec("vertex"), options=options)
    assert manifest["metadata"]["namespace"] == "ml"
    assert replicas_images(manifest) == {"me/trainer:2"}
    assert manifest["spec"]["tfReplicaSpecs"]["Chief"]["restartPolicy"] == "OnFailure"
    assert "ttlSecondsAfterFinished" not in manifest["spec"]["runPolicy"]
    assert json.loads(manifest["metadata"]["annotations"]["tfdist/package-uris"]) == ["gs://bucket/trainer-0.1.tar.gz"]
    assert any("packageUris are recorded" in w for w in warnings)


def replicas_images(manifest) -> set[str]:
    return {c["image"] for r in manifest["spec"]["tfReplicaSpecs"].values()
            for c in r["template"]["spec"]["containers"]}


def test_bad_options_are_reported_together():
    with pytest.raises(JobSpecError) as info:
        KubernetesOptions(namespace="Bad_NS", chief_restart_policy="Sometimes", backoff_limit=-1)
    assert {p.field for p in info.value.problems} == {"namespace", "chief_restart_policy", "backoff_limit"}


def _broken(mutate) -> list[str]:
    manifest, _ = render_tfjob(_spec("custom"))
    manifest = copy.deepcopy(manifest)
    mutate(manifest)
    return validate_tfjob(manifest)


def _worker_container(m):
    return m["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("mutate,expected", [
    (lambda m: m["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="2"),
     "spec.tfReplicaSpecs.Worker.replicas: '2' is not of type 'integer'"),
    (lambda m: _worker_container(m).update(nmae="x"), "('nmae' was unexpected)"),
    (lambda m: _worker_container(m).update(resources={"requests": {"cpu": "four"}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers.0.resources.requests.cpu"),
    (lambda m: m["spec"].pop("tfReplicaSpecs"), "'tfReplicaSpecs' is a required property"),
    (lambda m: _worker_container(m).pop("name"), "'name' is a required property"),
    (lambda m: m["spec"]["runPolicy"].update(backoffLimit="3"), "'3' is not of type 'integer'"),
    (lambda m: m["spec"]["tfReplicaSpecs"]["Master"].update(replicas=2), "at most 1 Master"),
    (lambda m: m["spec"]["tfReplicaSpecs"].update(Boss=m["spec"]["tfReplicaSpecs"]["PS"]), "unknown replica type"),
    (lambda m: m["spec"]["tfReplicaSpecs"].update(Chief=m["spec"]["tfReplicaSpecs"]["Master"]),
     "Chief and Master cannot both be set"),
    (lambda m: m["spec"]["tfReplicaSpecs"]["PS"].update(restartPolicy="Sometimes"), "'Sometimes' not in"),
    (lambda m: _worker_container(m).update(name="trainer"), "no container named 'tensorflow'"),
    (lambda m: m["metadata"].update(name="Bad_Name"), "is not a DNS-1035 label"),
    (lambda m: m["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes"), "cleanPodPolicy"),
])
def test_validator_rejects_what_the_cluster_would(mutate, expected):
    errors = _broken(mutate)
    assert any(expected in e for e in errors), errors


def test_embedded_schema_is_the_crd_subset_and_small():
    text = resources.files("toolkit.jobs").joinpath("schemas/tfjob-v1.json").read_text()
    schema = json.loads(text)
    assert len(text) < 40_000 and "description" not in text
    pod = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"][
        "properties"]["template"]["properties"]["spec"]
    assert pod["required"] == ["containers"]
    assert set(pod["properties"]["containers"]["items"]["properties"]) >= {"name", "image", "ports", "resources"}


def _as_dict(cluster_spec):
    """``cluster_spec`` as {job: [addresses]}: a dict here, a ClusterSpec in TF (``.as_dict()``)."""
    as_dict = getattr(cluster_spec, "as_dict", None)
    return {job: list(addrs) for job, addrs in (as_dict() if callable(as_dict) else cluster_spec).items()}


def test_each_pod_gets_the_operators_tf_config_and_the_runconfig_kubeflow_expects():
    """chief + 2 ps + 2 workers + evaluator: TF_CONFIG as the v1 operator writes it, RunConfig as
    Kubeflow's estimator_runconfig e2e test checks it (task_type, task_id, cluster_spec, is_chief,
    master, num_worker_replicas, num_ps_replicas) in every pod."""
    from toolkit.estimator.run_config import RunConfig
    from toolkit.jobs.engines.kubernetes.tfjob import pod_tf_configs

    spec = JobSpec.from_dict({"trainingInput": {
        "scaleTier": "CUSTOM", "masterType": "standard", "useChiefInTfConfig": True, "pythonModule": "trainer.task",
        "workerType": "standard", "workerCount": 2, "parameterServerType": "standard", "parameterServerCount": 2,
        "evaluatorType": "standard", "evaluatorCount": 1}}, job_id="dist-mnist")
    manifest, _ = render_tfjob(spec, options=KubernetesOptions(namespace="kubeflow-test"))
    configs = pod_tf_configs(manifest)
    assert sorted(configs) == ["dist-mnist-chief-0", "dist-mnist-evaluator-0", "dist-mnist-ps-0", "dist-mnist-ps-1",
                               "dist-mnist-worker-0", "dist-mnist-worker-1"]

    def svc(kind, i):
        return f"dist-mnist-{kind}-{i}.kubeflow-test.svc:2222"

    cluster = {"chief": [svc("chief", 0)], "evaluator": [svc("evaluator", 0)],
               "ps": [svc("ps", 0), svc("ps", 1)], "worker": [svc("worker", 0), svc("worker", 1)]}
    for pod, text in configs.items():
        kind, index = pod.split("-")[-2], int(pod.split("-")[-1])
        # The operator marshals a Go struct: cluster (keys sorted), task, environment, in that order.
        assert text == json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}, "environment": "cloud"})
        config = RunConfig(tf_config=text)
        expected = {"task_type": kind, "task_id": index, "cluster_spec": cluster, "is_chief": kind == "chief",
                    "master": f"grpc://{svc(kind, index)}", "num_worker_replicas": 3, "num_ps_replicas": 2,
                    "evaluation_master": ""}
        if kind == "evaluator":  # not part of the training cluster
            expected.update(task_id=0, cluster_spec={}, master="", num_worker_replicas=0, num_ps_replicas=0)
        actual = {key: getattr(config, key) for key in expected}
        actual["cluster_spec"] = _as_dict(actual["cluster_spec"])
        assert actual == expected, pod
    # TF's global ids: chief 0, then evaluator and worker alphabetically, ps last.
    ids = {pod: RunConfig(tf_config=text).global_id_in_cluster for pod, text in configs.items()}
    assert ids == {"dist-mnist-chief-0": 0, "dist-mnist-evaluator-0": None, "dist-mnist-worker-0": 2,
                   "dist-mnist-worker-1": 3, "dist-mnist-ps-0": 4, "dist-mnist-ps-1": 5}


def test_a_single_replica_tfjob_gets_no_tf_config():
    from toolkit.jobs.engines.kubernetes.tfjob import pod_tf_configs

    manifest, _ = render_tfjob(_spec("basic"))
    assert pod_tf_configs(manifest) == {}
