"""`tfdist jobs submit training` takes every flag of `gcloud ai-platform jobs submit training`.

The flags below are gcloud's reference (the GA synopsis, the beta's ``--network``
and ``--tpu-tf-version``, and the gcloud-wide flags), written out here rather
than read from the parser, so a flag the parser loses fails this test. Each one
is either applied (the spec's field changes, overriding ``--config``) or
recorded with a note that it has no effect on this backend.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from toolkit.cli import build_parser, main
from toolkit.cli._gcloud_flags import gcloud_submission
from toolkit.jobs import JobSpec

CUSTOM = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "cmle_custom.yaml"
GPU = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "cmle_gpu.yaml"

#: gcloud's reference, flag -> value ("" for a flag that takes none)
REFERENCE = {
    "--config": str(CUSTOM), "--enable-web-access": "", "--job-dir": "runs/census", "--labels": "team=ml,run=a1",
    "--master-accelerator": "count=1,type=nvidia-tesla-t4", "--master-image-uri": "gcr.io/p/master:1",
    "--master-machine-type": "n1-standard-16", "--module-name": "trainer.task2", "--package-path": "trainer/",
    "--packages": "dist/a.whl,dist/b.whl", "--parameter-server-accelerator": "type=nvidia-tesla-k80,count=2",
    "--parameter-server-image-uri": "gcr.io/p/ps:1", "--python-version": "3.7", "--region": "europe-west1",
    "--runtime-version": "2.11", "--scale-tier": "custom", "--service-account": "sa@p.iam.gserviceaccount.com",
    "--staging-bucket": "gs://staging", "--use-chief-in-tf-config": "true",
    "--worker-accelerator": "count=4,type=nvidia-tesla-v100", "--worker-image-uri": "gcr.io/p/worker:1",
    "--async": "", "--kms-key": "key1", "--kms-keyring": "ring1", "--kms-location": "us", "--kms-project": "p",
    "--parameter-server-count": "2", "--parameter-server-machine-type": "large_model", "--worker-count": "3",
    "--worker-machine-type": "complex_model_m",
    # gcloud beta
    "--network": "projects/1/global/networks/default", "--tpu-tf-version": "1.15",
    # gcloud-wide
    "--account": "me@example.com", "--billing-project": "bp", "--configuration": "default", "--flatten": "x",
    "--format": "json", "--impersonate-service-account": "sa2@p", "--log-http": "", "--project": "p",
    "--quiet": "", "--trace-token": "t", "--user-output-enabled": "false", "--verbosity": "debug",
}


def _argv(flags: dict[str, str], job: str = "census-1") -> list[str]:
    argv = ["jobs", "submit", "training", job]
    for flag, value in flags.items():
        argv += [flag] if value == "" else [f"{flag}={value}"]
    return argv + ["--", "--train-steps", "10"]


def _spec(flags: dict[str, str]) -> tuple[argparse.Namespace, JobSpec]:
    args = build_parser().parse_args(_argv(flags))
    overrides, labels, gcloud_flags = gcloud_submission(args)
    spec = JobSpec.from_file(args.config, job_id=args.job, overrides=overrides, labels=labels,
                             gcloud_flags=gcloud_flags)
    return args, spec


def test_every_flag_of_gcloud_is_applied_or_recorded_with_its_note():
    args, spec = _spec(REFERENCE)
    ti = spec.training_input
    applied = {
        "--job-dir": ti.job_dir == "runs/census", "--labels": dict(spec.labels) == {"team": "ml", "run": "a1"},
        "--master-accelerator": (ti.master.accelerator_count, ti.master.accelerator_type) == (1, "NVIDIA_TESLA_T4"),
        "--master-image-uri": ti.master.image_uri == "gcr.io/p/master:1",
        "--master-machine-type": ti.master.machine_type == "n1-standard-16",
        "--module-name": ti.python_module == "trainer.task2", "--package-path": ti.package_path == "trainer/",
        "--packages": ti.package_uris == ("dist/a.whl", "dist/b.whl"),
        "--parameter-server-accelerator": (ti.parameter_server.accelerator_count,
                                           ti.parameter_server.accelerator_type) == (2, "NVIDIA_TESLA_K80"),
        "--parameter-server-image-uri": ti.parameter_server.image_uri == "gcr.io/p/ps:1",
        "--python-version": ti.python_version == "3.7", "--region": ti.region == "europe-west1",
        "--runtime-version": ti.runtime_version == "2.11", "--scale-tier": ti.scale_tier == "CUSTOM",
        "--use-chief-in-tf-config": ti.use_chief_in_tf_config and ti.primary_task_type == "chief",
        "--worker-accelerator": (ti.worker.accelerator_count, ti.worker.accelerator_type) == (4, "NVIDIA_TESLA_V100"),
        "--worker-image-uri": ti.worker.image_uri == "gcr.io/p/worker:1",
        "--parameter-server-count": ti.parameter_server.count == 2,
        "--parameter-server-machine-type": ti.parameter_server.machine_type == "large_model",
        "--worker-count": ti.worker.count == 3, "--worker-machine-type": ti.worker.machine_type == "complex_model_m",
        "--config": ti.max_running_seconds == 7200,  # what no flag set comes from the file
        "--async": args.async_ and not args.stream_logs,  # return once submitted (gcloud's default too)
    }
    assert ti.args == ("--train-steps", "10")
    notes = {p.field: p.message for p in spec.warnings if "no effect on this backend" in p.message}
    recorded = {  # a trainingInput field gcloud would send: kept as sent, with its note
        "--enable-web-access": ("enableWebAccess", True),
        "--service-account": ("serviceAccount", "sa@p.iam.gserviceaccount.com"),
        "--network": ("network", "projects/1/global/networks/default"),
        "--kms-key": ("encryptionConfig", {"kmsKeyName": "projects/p/locations/us/keyRings/ring1/cryptoKeys/key1"}),
    }
    for flag, (field, value) in recorded.items():
        assert ti.recorded[field] == value and f"trainingInput.{field}" in notes, flag
        assert spec.to_dict()["trainingInput"][field] == value
    for part in ("--kms-keyring", "--kms-location", "--kms-project"):  # parts of the one key name
        recorded[part] = recorded["--kms-key"]
    own = {flag for flag in REFERENCE if flag not in applied and flag not in recorded}
    for flag in own:  # gcloud's own flags: in the spec's gcloudFlags, each with its note
        assert flag in spec.gcloud_flags and flag in notes, flag
        assert f"({spec.gcloud_flags[flag]})" in notes[flag]
    assert spec.gcloud_flags["--staging-bucket"] == "gs://staging" and spec.gcloud_flags["--quiet"] == "true"
    assert "tasks run the local package" in notes["--staging-bucket"]
    assert {flag for flag, ok in applied.items() if not ok} == set()
    assert own == {"--staging-bucket", "--tpu-tf-version", "--account", "--billing-project", "--configuration",
                   "--flatten", "--format", "--impersonate-service-account", "--log-http", "--project", "--quiet",
                   "--trace-token", "--user-output-enabled", "--verbosity"}
    # the record round-trips: what describe shows is what was submitted
    again = JobSpec.from_dict(spec.to_dict())
    assert again.gcloud_flags == spec.gcloud_flags and again.training_input == ti


@pytest.mark.parametrize(("given", "expected"), [(["--use-chief-in-tf-config"], True),
                                                 (["--use-chief-in-tf-config=true"], True),
                                                 (["--use-chief-in-tf-config", "false"], False),
                                                 (["--use-chief-in-tf-config=False"], False), ([], None)])
def test_use_chief_in_tf_config_takes_a_value_as_in_gcloud(given, expected):
    args = build_parser().parse_args(["jobs", "submit", "training", "j", "--module-name", "m", *given])
    assert args.use_chief_in_tf_config is expected


def test_scale_tier_is_taken_in_gcloud_spelling_and_the_api_one():
    for text in ("basic-gpu", "BASIC_GPU"):
        args = build_parser().parse_args(["jobs", "submit", "training", "j", "--scale-tier", text])
        assert args.scale_tier == "BASIC_GPU"


def test_a_replica_flag_replaces_its_key_and_keeps_the_files_others():
    _, spec = _spec({"--config": str(GPU), "--worker-image-uri": "gcr.io/p/w:2"})
    worker = spec.training_input.worker
    assert worker.image_uri == "gcr.io/p/w:2" and (worker.accelerator_count, worker.accelerator_type) == (
        2, "NVIDIA_TESLA_T4")  # the file's acceleratorConfig stays


def test_async_and_stream_logs_exclude_each_other_and_bad_values_name_the_flag(capsys):
    with pytest.raises(SystemExit) as info:
        main(_argv({"--module-name": "m", "--async": "", "--stream-logs": ""}))
    assert info.value.code == 2 and "not allowed with argument --async" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(_argv({"--module-name": "m", "--worker-accelerator": "gpus=2"}))
    assert "--worker-accelerator: expected count=COUNT,type=TYPE" in capsys.readouterr().err
    assert main(_argv({"--module-name": "m", "--flags-file": "f.yaml"})) == 2
    assert "--flags-file is not read by tfdist" in capsys.readouterr().err
