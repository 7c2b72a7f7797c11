"""Bounded specs: every documented limit is refused at submit with its field named, and big
clusters render the same text they always did (rendering speed itself is benchmarked, not tested)."""
from __future__ import annotations

import json

import pytest
import yaml

from tf_config import TFConfig, generate, render
from tf_config._render import task_name
from tf_config.limits import MAX_FILE_BYTES
from toolkit.cli import main
from toolkit.jobs import JobSpec, JobSpecError
from toolkit.jobs.model.limits import MAX_PARALLEL_TRIALS, MAX_PARAM_VALUES, MAX_PARAMS, MAX_REPLICAS, MAX_TRIALS

_CUSTOM = {"scaleTier": "CUSTOM", "masterType": "standard", "workerType": "standard",
           "parameterServerType": "standard", "pythonModule": "trainer.task"}


def _study(**fields):
    params = fields.pop("params", [{"parameterName": "lr", "type": "DOUBLE", "minValue": 0.01, "maxValue": 1}])
    return {"trainingInput": {"pythonModule": "trainer.task", "hyperparameters": {
        "goal": "MAXIMIZE", "params": params, **fields}}}


@pytest.mark.parametrize("doc, field, text", [
    ({"trainingInput": {**_CUSTOM, "workerCount": MAX_REPLICAS + 1}}, "trainingInput.workerCount",
     f"received {MAX_REPLICAS + 1}; expected at most 1,000 tasks"),
    ({"trainingInput": {**_CUSTOM, "parameterServerCount": 5000}}, "trainingInput.parameterServerCount",
     "expected at most 1,000 tasks"),
    ({"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                           "pythonPackageSpec": {"pythonModule": "t.m"}},
                          {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 100000}]},
     "workerPoolSpecs[1].replicaCount", "expected at most 1,000 tasks"),
    (_study(maxTrials=MAX_TRIALS + 1), "trainingInput.hyperparameters.maxTrials", "at most 1,000 trials"),
    (_study(maxTrials=100, maxParallelTrials=MAX_PARALLEL_TRIALS + 1),
     "trainingInput.hyperparameters.maxParallelTrials", f"at most {MAX_PARALLEL_TRIALS} trials at a time"),
    (_study(params=[{"parameterName": f"p{i}", "type": "DOUBLE", "minValue": 0, "maxValue": 1}
                    for i in range(MAX_PARAMS + 1)]), "trainingInput.hyperparameters.params", "at most 100"),
    (_study(params=[{"parameterName": "c", "type": "CATEGORICAL",
                     "categoricalValues": [f"v{i}" for i in range(MAX_PARAM_VALUES + 1)]}]),
     "trainingInput.hyperparameters.params[0].categoricalValues", "at most 1,000 values"),
    ({"trainingInput": {"pythonModule": "t.m", "args": ["x" * 70_000]}}, "trainingInput.args[0]",
     "is a string of 70,000 characters; at most 65,536"),
    ({"trainingInput": {"pythonModule": "t.m", "args": ["a"] * 10_001}}, "trainingInput.args",
     "has more than 10,000 items"),
    ({"trainingInput": {"pythonModule": "t.m", "region": float("nan")}}, "trainingInput.region",
     "received nan; expected a finite number"),
    ({"trainingInput": {"pythonModule": "t.m", "jobDir": "out\x00put"}}, "trainingInput.jobDir",
     "expected text without a NUL byte"),
    ({"trainingInput": {"pythonModule": "t.m", "packagePath": "a" * 300}}, "trainingInput.packagePath",
     "expected a path of at most 4,096 bytes, each name in it at most 255"),
    ({"trainingInput": {"pythonModule": "t.m", "labels": {"a": 10 ** 400}}}, "trainingInput.labels.a",
     "received <an integer of about 401 digits>; expected a number of at most 9,223,372,036,854,775,807"),
])
def test_each_limit_is_refused_with_its_field(doc, field, text):
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_dict(doc, job_id="bounded")
    assert info.value.field == field and text in str(info.value), str(info.value)


def test_at_the_limits_a_spec_is_accepted():
    spec = JobSpec.from_dict({"trainingInput": {**_CUSTOM, "workerCount": MAX_REPLICAS, "useChiefInTfConfig": True}},
                             job_id="big")
    assert spec.training_input.worker.count == MAX_REPLICAS


def test_a_self_referencing_document_from_python_is_refused_not_walked_forever():
    loop: list = []
    loop.append(loop)
    with pytest.raises(JobSpecError, match="nests deeper than 64 levels"):
        JobSpec.from_dict({"trainingInput": {"pythonModule": "t.m", "args": loop}}, job_id="loop")


@pytest.mark.parametrize("text, message", [
    ("a: &x [*x]\n", "the alias *x on line 1 is inside the value it names"),
    ("[" * 65 + "]" * 65, "nests deeper than 64 levels"),
    ("".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else 'lol'}]\n" for i in range(7)),
     "expands to more than 100,000 values"),
    ("trainingInput: {region: !!timestamp 2001-13-45}\n", "month must be in 1..12"),
])
def test_yaml_that_would_not_end_well_is_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_file(path, job_id="yaml-job")
    assert info.value.field == "path" and message in str(info.value) and "job.yaml" in str(info.value)


def test_dates_stay_text_and_big_files_are_refused_unread(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("trainingInput: {pythonModule: t.m, region: 2001-13-45}\n")
    assert JobSpec.from_file(path, job_id="dated").training_input.region == "2001-13-45"
    path.write_text("# " + "x" * MAX_FILE_BYTES)
    with pytest.raises(JobSpecError, match="larger than the 1,048,576 bytes tfdist reads"):
        JobSpec.from_file(path, job_id="big")


def test_a_thousand_task_dry_run_renders_every_replica(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"trainingInput": {**_CUSTOM, "workerCount": 998, "parameterServerCount": 1,
                                                      "useChiefInTfConfig": True}}))
    code = main(["jobs", "submit", "training", "wide", "--config", str(spec), "--backend", "kubernetes",
                 "--dry-run", "--image", "trainer:1"])
    manifest = yaml.safe_load(capsys.readouterr().out)
    replicas = {kind: r["replicas"] for kind, r in manifest["spec"]["tfReplicaSpecs"].items()}
    assert code == 0 and replicas == {"Chief": 1, "Worker": 998, "PS": 1}


def _reference(configs: list[TFConfig], fmt: str) -> str:
    """What the formats wrote when every config was serialized whole."""
    if fmt == "export":
        return "\n".join(f"# {task_name(c)}\nexport TF_CONFIG='" + c.to_json().replace("'", "'\\''") + "'\n"
                         for c in configs)
    if fmt == "env":
        return "\n".join(f"# {task_name(c)}\nTF_CONFIG={json.dumps(c.to_dict(), separators=(',', ':'))}\n"
                         for c in configs)
    doc = configs[0].to_dict() if len(configs) == 1 else {task_name(c): c.to_dict() for c in configs}
    return json.dumps(doc, indent=2) + "\n" if fmt == "json" else \
        yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


@pytest.mark.parametrize("fmt", ["export", "env", "json", "yaml"])
def test_rendering_the_shared_cluster_once_writes_the_same_text(fmt):
    groups = [generate(chief=1, workers=3, ps=2, evaluator=1, base_port=2000),
              generate(chief=1, workers=2, ps=1, dialect="cmle", hosts=["a.example", "b:2300"]),
              generate(chief=1, workers=1, ps=1, dialect="tfjob", job_name="mnist", namespace="ml"),
              [TFConfig.from_dict({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1},
                                   "model_dir": "/runs/it's/é \\ yes", "rpc_layer": "grpc"}), TFConfig()]]
    for configs in groups:
        for part in (configs, configs[:1]):
            assert render(part, fmt) == _reference(part, fmt)


@pytest.mark.parametrize("field", ["workers", "ps"])
def test_the_launchers_python_api_refuses_more_tasks_than_the_limit_before_starting_any(field):
    from tf_config.limits import MAX_TASKS
    from toolkit.launcher import LaunchError, LaunchSpec

    with pytest.raises(LaunchError, match=rf"`{field}` is 1,001; expected at most 1,000") as info:
        LaunchSpec(cmd=("python", "-c", "pass"), **{field: MAX_TASKS + 1})
    assert info.value.field == field
    assert LaunchSpec(cmd=("python", "-c", "pass"), workers=MAX_TASKS, ps=1).workers == MAX_TASKS
