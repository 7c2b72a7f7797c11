"""Job spec parsing: CMLE and Vertex configs, overrides, and every error message."""
from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.jobs import JobNameError, JobSpec, JobSpecError, suggest_job_name, validate_job_name

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


def _errors(doc, **kwargs) -> dict[str, str]:
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_dict(doc, **kwargs)
    return {p.field: p.message for p in info.value.problems if p.severity == "error"}


def _ti(**fields):
    return {"trainingInput": {"pythonModule": "trainer.task", **fields}}


def test_cmle_custom_file_parses_every_field():
    spec = JobSpec.from_file(FIXTURES / "cmle_custom.yaml", job_id="ps-job")
    ti = spec.training_input
    assert spec.job_id == "ps-job" and dict(spec.labels) == {"team": "research"}
    assert ti.task_counts == {"master": 1, "worker": 2, "ps": 1}
    assert ti.task_names == ("master-0", "worker-0", "worker-1", "ps-0")
    assert ti.parameter_server.machine_type == "n1-highmem-8"
    assert ti.args == ("--train-steps", "200")  # YAML numbers become argv strings
    assert (ti.region, ti.runtime_version, ti.max_running_seconds) == ("us-central1", "2.21", 7200)
    assert not ti.use_chief_in_tf_config and ti.primary_task_type == "master"


def test_scale_tiers_fix_the_counts():
    counts = {tier: JobSpec.from_dict(_ti(scaleTier=tier)).training_input.task_counts
              for tier in ("BASIC", "BASIC_GPU", "STANDARD_1", "PREMIUM_1")}
    assert counts == {"BASIC": {"master": 1}, "BASIC_GPU": {"master": 1},
                      "STANDARD_1": {"master": 1, "worker": 4, "ps": 3},
                      "PREMIUM_1": {"master": 1, "worker": 19, "ps": 11}}
    assert JobSpec.from_dict(_ti(scaleTier="basic_gpu")).training_input.master.machine_type == "standard_gpu"


def test_gpu_file_keeps_images_and_accelerators():
    ti = JobSpec.from_file(FIXTURES / "cmle_gpu.yaml", job_id="gpu").training_input
    assert ti.task_counts == {"chief": 1, "worker": 1, "evaluator": 1}
    assert (ti.worker.accelerator_type, ti.worker.accelerator_count) == ("NVIDIA_TESLA_T4", 2)
    assert ti.master.image_uri == "registry.example.com/trainer:1" and ti.job_dir == "gs://bucket/out"


def test_vertex_pools_map_onto_the_same_spec():
    spec = JobSpec.from_file(FIXTURES / "vertex.yaml", job_id="vertex-job")
    ti = spec.training_input
    assert spec.source == "workerPoolSpecs" and ti.scale_tier == "CUSTOM"
    assert ti.task_counts == {"chief": 1, "worker": 2, "ps": 1}  # Vertex names the primary `chief`
    assert (ti.python_module, ti.args, ti.job_dir) == ("trainer.task", ("--epochs", "3"), "gs://bucket/vertex-out")
    assert ti.parameter_server.machine_type == "e2-highmem-4"
    assert ti.master.image_uri == "registry.example.com/tf:2.21"


def test_round_trip_through_to_dict_is_lossless():
    for name in ("cmle_custom.yaml", "cmle_gpu.yaml", "vertex.yaml", "hptuning.yaml"):
        spec = JobSpec.from_file(FIXTURES / name, job_id="rt")
        again = JobSpec.from_dict(spec.to_dict())
        assert again.training_input == spec.training_input and again.labels == spec.labels, name


def test_flags_override_the_file():
    spec = JobSpec.from_file(FIXTURES / "cmle_custom.yaml", job_id="x", overrides={
        "pythonModule": "other.main", "jobDir": "/tmp/out", "args": ["--a", "1"], "useChiefInTfConfig": True})
    ti = spec.training_input
    assert (ti.python_module, ti.job_dir, ti.args) == ("other.main", "/tmp/out", ("--a", "1"))
    assert ti.task_counts["chief"] == 1
    only_flags = JobSpec.from_dict({}, job_id="y", overrides={"pythonModule": "m", "scaleTier": "STANDARD_1"})
    assert only_flags.training_input.task_counts == {"master": 1, "worker": 4, "ps": 3}


def test_negative_worker_count_names_field_value_and_fix():
    errors = _errors(_ti(scaleTier="CUSTOM", masterType="standard", workerCount=-1))
    assert errors == {"trainingInput.workerCount": "received -1; expected an integer >= 0. "
                                                   "Set workerCount to 0 or more (tasks besides the master)."}


def test_unknown_scale_tier_lists_valid_tiers_and_suggests():
    message = _errors(_ti(scaleTier="STANDARD_2"))["trainingInput.scaleTier"]
    assert "received 'STANDARD_2'" in message
    assert "BASIC, BASIC_GPU, STANDARD_1, PREMIUM_1, CUSTOM" in message
    assert "Did you mean 'STANDARD_1'?" in message


def test_custom_without_master_type():
    message = _errors(_ti(scaleTier="CUSTOM"))["trainingInput.masterType"]
    assert message.startswith("is missing; expected a machine type, because scaleTier is CUSTOM")
    assert "Add `masterType: standard`" in message


def test_custom_workers_need_a_worker_type_and_ps_a_ps_type():
    errors = _errors(_ti(scaleTier="CUSTOM", masterType="standard", workerCount=2, parameterServerCount=1))
    assert "workerCount 2 needs one" in errors["trainingInput.workerType"]
    assert "parameterServerCount 1 needs one" in errors["trainingInput.parameterServerType"]


def test_unknown_keys_are_warnings_with_did_you_mean_at_every_level():
    spec = JobSpec.from_dict({"traningInput": {}, "trainingInput": {"pythonModule": "m", "workrCount": 2,
                                                                   "masterConfig": {"imageUrl": "x"}}})
    warnings = {w.field: w.message for w in spec.warnings}
    assert "unknown field 'traningInput' is ignored. Did you mean 'trainingInput'?" in warnings["traningInput"]
    assert "Did you mean 'workerCount'?" in warnings["trainingInput.workrCount"]
    assert "Did you mean 'imageUri'?" in warnings["trainingInput.masterConfig.imageUrl"]


@pytest.mark.parametrize("fields, field", [
    ({"scaleTier": "CUSTOM", "masterType": "cloud_tpu"}, "trainingInput.masterType"),
    ({"scaleTier": "CUSTOM", "masterType": "standard", "workerType": "cloud_tpu", "workerCount": 1},
     "trainingInput.workerType"),
    ({"scaleTier": "BASIC_TPU"}, "trainingInput.scaleTier"),
    ({"scaleTier": "CUSTOM", "masterType": "n1-standard-8",
      "masterConfig": {"acceleratorConfig": {"count": 8, "type": "TPU_V3"}}},
     "trainingInput.masterConfig.acceleratorConfig.type"),
])
def test_tpu_jobs_are_refused_naming_the_backends(fields, field):
    msg = _errors(_ti(**fields))[field]
    assert "TPU jobs cannot run on the local and kubernetes backends, which have no TPUs" in msg
    assert "unknown machine type" not in msg


def test_every_published_field_is_honoured_recorded_or_refused():
    """A job as `gcloud ai-platform jobs describe --format json` prints it, with every trainingInput field."""
    doc = {"jobId": "census-1", "createTime": "2019-01-01T00:00:00Z", "state": "SUCCEEDED", "etag": "x",
           "trainingOutput": {"consumedMLUnits": 1.2},
           "trainingInput": {
               "scaleTier": "CUSTOM", "masterType": "n1-standard-8", "workerType": "n1-standard-8",
               "workerCount": "2", "parameterServerType": "n1-highmem-8", "parameterServerCount": "1",
               "evaluatorType": "n1-standard-4", "evaluatorCount": "1", "useChiefInTfConfig": True,
               "masterConfig": {"imageUri": "gcr.io/p/trainer:1", "diskConfig": {"bootDiskSizeGb": 200},
                                "acceleratorConfig": {"count": "1", "type": "NVIDIA_TESLA_T4"}},
               "packageUris": ["gs://b/trainer-0.1.tar.gz"], "pythonModule": "trainer.task",
               "args": ["--train-steps", "1000"], "region": "us-central1", "jobDir": "gs://b/out",
               "runtimeVersion": "2.11", "pythonVersion": "3.7", "serviceAccount": "sa@p.iam",
               "network": "projects/1/global/networks/n", "encryptionConfig": {"kmsKeyName": "k"},
               "enableWebAccess": True, "scheduling": {"maxRunningTime": "3600s", "maxWaitTime": "60s",
                                                       "priority": 5}}}
    spec = JobSpec.from_dict(doc)
    ti = spec.training_input
    assert ti.task_counts == {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}
    assert (ti.master.accelerator_count, ti.max_running_seconds, ti.args) == (1, 3600, ("--train-steps", "1000"))
    warned = {w.field for w in spec.warnings}
    assert warned == {"createTime", "state", "etag", "trainingOutput", "trainingInput.masterConfig.diskConfig",
                      "trainingInput.serviceAccount", "trainingInput.network", "trainingInput.encryptionConfig",
                      "trainingInput.enableWebAccess", "trainingInput.scheduling.maxWaitTime",
                      "trainingInput.scheduling.priority"}
    assert ti.recorded["masterConfig.diskConfig"] == {"bootDiskSizeGb": 200}
    back = ti.to_dict()
    assert back["masterConfig"]["diskConfig"] == {"bootDiskSizeGb": 200}
    assert back["scheduling"] == {"maxRunningTime": "3600s", "maxWaitTime": "60s", "priority": 5}
    assert JobSpec.from_dict({"trainingInput": back}).training_input == ti
    assert "training jobs only" in _errors({"predictionInput": {}, **_ti()})["predictionInput"]


def test_predefined_tier_rejects_counts_and_warns_about_machine_types():
    errors = _errors(_ti(scaleTier="STANDARD_1", workerCount=2))
    assert "scaleTier STANDARD_1 fixes the counts (1 master, 4 workers, 3 ps)" in errors["trainingInput.workerCount"]
    spec = JobSpec.from_dict(_ti(scaleTier="BASIC", masterType="large_model"))
    assert [(w.field, w.message) for w in spec.warnings] == [
        ("trainingInput.masterType", "is ignored: scaleTier BASIC sets the machines.")]


def test_evaluator_rules():
    assert "at most one evaluator" in _errors(_ti(
        scaleTier="CUSTOM", masterType="standard", evaluatorType="standard", evaluatorCount=2,
        useChiefInTfConfig=True))["trainingInput.evaluatorCount"]
    assert "Set `useChiefInTfConfig: true`" in _errors(_ti(
        scaleTier="CUSTOM", masterType="standard", evaluatorType="standard", evaluatorCount=1))[
        "trainingInput.evaluatorCount"]


def test_every_problem_is_reported_at_once():
    errors = _errors({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "gpu_monster", "workerCount": "two",
                                        "args": [["nested"]], "useChiefInTfConfig": "yes",
                                        "runtimeVersion": 2.21, "scheduling": {"maxRunningTime": "2h"}}})
    assert set(errors) == {"trainingInput.masterType", "trainingInput.workerCount", "trainingInput.args[0]",
                           "trainingInput.useChiefInTfConfig", "trainingInput.runtimeVersion",
                           "trainingInput.scheduling.maxRunningTime", "trainingInput.pythonModule"}
    assert "received 'gpu_monster'; expected a known machine type" in errors["trainingInput.masterType"]
    assert errors["trainingInput.useChiefInTfConfig"] == (
        "received 'yes'; expected true or false. Write `useChiefInTfConfig: true` or "
        "`useChiefInTfConfig: false` (no quotes).")
    assert "such as '7200s'" in errors["trainingInput.scheduling.maxRunningTime"]


def test_int64_strings_count_as_integers():
    ti = JobSpec.from_dict(_ti(scaleTier="CUSTOM", masterType="standard", workerType="standard",
                               workerCount="3")).training_input
    assert ti.worker.count == 3


def test_bad_module_and_container_command_are_rejected():
    errors = _errors({"trainingInput": {"pythonModule": "trainer/task.py",
                                        "masterConfig": {"containerCommand": ["sh"]}}})
    assert "a dotted Python module name" in errors["trainingInput.pythonModule"]
    assert "is not supported" in errors["trainingInput.masterConfig.containerCommand"]


def test_recorded_fields_warn_and_are_kept():
    spec = JobSpec.from_dict(_ti(serviceAccount="sa@example.com", network="vpc-1",
                                 scheduling={"maxWaitTime": "60s"}))
    assert dict(spec.training_input.recorded) == {"serviceAccount": "sa@example.com", "network": "vpc-1",
                                                  "scheduling.maxWaitTime": "60s"}
    assert {w.field for w in spec.warnings} == {"trainingInput.serviceAccount", "trainingInput.network",
                                                "trainingInput.scheduling.maxWaitTime"}


def test_labels_follow_kubernetes_rules():
    errors = _errors({"labels": {"Team": "x", "ok": "Bad Value"}, **_ti()})
    assert set(errors) == {"labels.Team", "labels.ok"}


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(JobSpecError, match="cannot read"):
        JobSpec.from_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainingInput: [unclosed\n")
    with pytest.raises(JobSpecError, match="is not valid YAML or JSON"):
        JobSpec.from_file(bad)
    as_json = tmp_path / "job.json"
    as_json.write_text('{"trainingInput": {"pythonModule": "trainer.task", "scaleTier": "BASIC"}}')
    assert JobSpec.from_file(as_json).training_input.python_module == "trainer.task"


def test_job_id_in_file_is_checked_and_command_line_wins():
    assert "Use 'my-job' instead." in _errors({"jobId": "my_job", **_ti()})["jobId"]
    spec = JobSpec.from_dict({"jobId": "from-file", **_ti()}, job_id="from-cli")
    assert spec.job_id == "from-cli" and spec.warnings[0].field == "jobId"


def test_vertex_errors():
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "pythonPackageSpec": {"pythonModule": "a.b"}}
    errors = _errors({"workerPoolSpecs": [{**pool, "replicaCount": 2},
                                          {**pool, "replicaCount": 1, "pythonPackageSpec": {"pythonModule": "c.d"}},
                                          {"containerSpec": {"imageUri": "x", "command": ["sh"]}}]})
    assert "received 2; expected an integer from 1 to 1" in errors["workerPoolSpecs[0].replicaCount"]
    assert "runs 'c.d'" in errors["workerPoolSpecs[1]"] and "pool 0 runs 'a.b'" in errors["workerPoolSpecs[1]"]
    assert "is not supported" in errors["workerPoolSpecs[2].containerSpec.command"]
    assert "a list of 1 to 4 pools" in _errors({"workerPoolSpecs": []})["workerPoolSpecs"]


@pytest.mark.parametrize("name", ["mnist-run-1", "a", "x" * 63, "job-0"])
def test_valid_job_names(name):
    assert validate_job_name(name) == name


@pytest.mark.parametrize("name,why,suggestion", [
    ("My_Job", "'M', 'J', '_' are not allowed", "my-job"),
    ("../etc/passwd", "'.', '/' are not allowed", "etc-passwd"),
    ("1st-run", "it must start with a letter", "job-1st-run"),
    ("run-", "it must end with a letter or digit", "run"),
    ("a" * 64, "this one has 64 characters", "a" * 63),
    ("job;rm -rf", "' ', ';' are not allowed", "job-rm-rf"),
])
def test_invalid_job_names_explain_and_suggest(name, why, suggestion):
    with pytest.raises(JobNameError) as info:
        validate_job_name(name)
    message = str(info.value)
    assert f"received {name!r}" in message and "DNS-1035 label" in message
    assert why.replace("'M', 'J'", "'J', 'M'") in message
    assert f"Use {suggestion!r} instead." in message
    assert validate_job_name(suggest_job_name(name)) == suggestion


def test_vertex_tpu_pools_are_refused_naming_the_backends():
    errors = _errors({"workerPoolSpecs": [{
        "machineSpec": {"machineType": "cloud-tpu", "acceleratorType": "TPU_V3", "acceleratorCount": 8},
        "replicaCount": 1, "pythonPackageSpec": {"pythonModule": "trainer.task"}}]})
    for field in ("workerPoolSpecs[0].machineSpec.machineType", "workerPoolSpecs[0].machineSpec.acceleratorType"):
        assert "TPU jobs cannot run on the local and kubernetes backends" in errors[field]


@pytest.mark.parametrize("count, shown", [("²", "'²'"), ("1" + "0" * 30, "'1000000000000000000000000000000'"),
                                          (2.5, "2.5"), ("NaN", "'NaN'")])
def test_counts_cmle_writes_as_text_are_read_only_when_they_are_whole_numbers(count, shown):
    errors = _errors({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "standard", "workerType": "standard",
                                        "workerCount": count, "pythonModule": "trainer.task"}})
    assert f"received {shown}; expected an integer >= 0" in errors["trainingInput.workerCount"]


def test_a_yaml_date_is_the_text_written(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("trainingInput:\n  pythonModule: trainer.task\n  region: 2001-12-01\n  runtimeVersion: '2.21'\n")
    assert JobSpec.from_file(path, job_id="dated").training_input.region == "2001-12-01"
