"""Kubeflow Trainer v2: the rendered TrainJob and ClusterTrainingRuntime validate, and their pods' TF_CONFIG
(derived by `tfdist run` from the environment each pod gets) is one consistent cluster."""
from __future__ import annotations

import copy
import json

import yaml

from tf_config import from_env
from toolkit.cli import main
from toolkit.jobs import JobSpec
from toolkit.jobs.engines.kubernetes.trainjob import RUNTIME_NAME, render_trainjob, validate_runtime, validate_trainjob
from toolkit.launcher._dialect import DIALECTS

SPEC = {"trainingInput": {"scaleTier": "CUSTOM", "masterType": "n1-standard-4", "workerType": "n1-standard-8",
                          "workerCount": 2, "parameterServerType": "n1-standard-4", "parameterServerCount": 1,
                          "pythonModule": "trainer.task", "args": ["--epochs", "3"], "jobDir": "gs://b/out"}}


def _pod_tf_configs(job: dict) -> list[dict]:
    """What `tfdist run` gives each pod: the env Trainer v2 / JobSet / the Indexed Job set, and the command."""
    trainer, name = job["spec"]["trainer"], job["metadata"]["name"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    command = trainer["command"]
    layout, dialect = command[command.index("--layout") + 1], command[command.index("--dialect") + 1]
    configs = []
    for i in range(trainer["numNodes"]):
        pod_env = {**env, "JOB_COMPLETION_INDEX": str(i), "HOSTNAME": f"{name}-node-0-{i}"}
        cfg = from_env(pod_env, layout=layout, kind="kubernetes").tf_config
        configs.append(DIALECTS["cmle"].apply(cfg).to_dict() if dialect == "cmle" else cfg.to_dict())
    return configs


def test_rendered_trainjob_and_runtime_validate_and_give_every_pod_its_role():
    job, runtime, warnings = render_trainjob(JobSpec.from_dict(SPEC, job_id="mnist"))
    assert validate_trainjob(job) == [] and validate_runtime(runtime) == []
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == RUNTIME_NAME
    assert job["spec"]["trainer"]["resourcesPerNode"] == {"requests": {"cpu": "8", "memory": "30720Mi"}}
    assert any("largest machine type (n1-standard-8)" in w for w in warnings)
    configs = _pod_tf_configs(job)
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == [
        ("master", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    assert configs[0]["cluster"]["ps"] == ["mnist-node-0-3.mnist:2222"]
    assert job["spec"]["trainer"]["args"] == ["--epochs", "3", "--job-dir", "gs://b/out"]


def test_what_the_crds_refuse_is_reported_with_the_path():
    job, runtime, _ = render_trainjob(JobSpec.from_dict(SPEC, job_id="mnist"))
    bad = copy.deepcopy(job)
    bad["spec"]["trainer"]["numNodes"] = "4"
    bad["spec"]["trainer"]["gpus"] = 1
    errors = validate_trainjob(bad)
    assert any(e.startswith("spec.trainer.numNodes: '4' is not of type 'integer'") for e in errors), errors
    assert any("spec.trainer" in e and "'gpus' was unexpected" in e for e in errors), errors
    del bad["spec"]["runtimeRef"]["name"]
    assert any("'name' is a required property" in e for e in validate_trainjob(bad))
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["stdin"] = True
    assert any("'stdin' was unexpected" in e for e in validate_runtime(runtime))


def test_cli_dry_run_prints_both_manifests(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path))
    config = tmp_path / "job.json"
    config.write_text(json.dumps(SPEC))
    assert main(["jobs", "submit", "training", "mnist", "--config", str(config), "--backend", "kubernetes",
                 "--dry-run", "--kubeflow-trainer"]) == 0
    runtime, job = yaml.safe_load_all(capsys.readouterr().out)
    assert runtime["kind"] == "ClusterTrainingRuntime" and job["kind"] == "TrainJob"
    assert job["spec"]["trainer"]["command"][:2] == ["tfdist", "run"]
