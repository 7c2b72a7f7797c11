"""`gcloud ai-platform jobs submit training`'s flags, each with its gcloud meaning.

A submit command written for gcloud runs here unchanged. Each flag of gcloud's
reference is one of:

* **applied**: it overrides the same field of ``--config``, as gcloud does
  (counts, machine types, accelerators, images, versions, ``--scale-tier``,
  ``--region``, ``--labels``, ``--use-chief-in-tf-config[=BOOL]``);
* **recorded**: a ``trainingInput`` field with no meaning here
  (``--service-account``, ``--enable-web-access``, ``--kms-*``, ...) goes in the
  spec as gcloud would send it, and the spec reader warns that it has no effect;
* **gcloud's own**: a flag that tells gcloud itself what to do
  (``--staging-bucket``, ``--project``, ``--quiet``, ...) is kept in the
  spec's ``gcloud_flags``, shown by ``describe`` with the same note.

``--help`` groups them as gcloud's reference does.
"""
from __future__ import annotations

import argparse
import re
from typing import Any

from toolkit.cli._types import task_count

__all__ = ["GCLOUD_SUBMIT_FLAGS", "GCLOUD_WIDE_FLAGS", "add_gcloud_training_flags", "gcloud_submission"]

# role flag prefix -> (count field, machine type field, config field)
_ROLES = {"master": (None, "masterType", "masterConfig"),
          "worker": ("workerCount", "workerType", "workerConfig"),
          "parameter-server": ("parameterServerCount", "parameterServerType", "parameterServerConfig"),
          "evaluator": ("evaluatorCount", "evaluatorType", "evaluatorConfig")}
#: flag -> the trainingInput field it overrides
_FIELDS = {"module_name": "pythonModule", "package_path": "packagePath", "job_dir": "jobDir",
           "region": "region", "runtime_version": "runtimeVersion", "python_version": "pythonVersion",
           "scale_tier": "scaleTier", "use_chief_in_tf_config": "useChiefInTfConfig",
           "service_account": "serviceAccount", "network": "network"}
#: gcloud's own flags: what they do in gcloud, which is why they do nothing here
_GCLOUD_ONLY = {"staging_bucket": "--staging-bucket", "tpu_tf_version": "--tpu-tf-version"}
GCLOUD_WIDE_FLAGS = ("--account", "--billing-project", "--configuration", "--flatten", "--format",
                     "--impersonate-service-account", "--log-http", "--project", "--quiet", "--trace-token",
                     "--user-output-enabled", "--verbosity")
_ACCELERATOR = re.compile(r"(count=(?P<count>\d+)|type=(?P<type>[A-Za-z0-9_-]+))"
                          r"(,(count=(?P<count2>\d+)|type=(?P<type2>[A-Za-z0-9_-]+)))?")
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _bool(text: str) -> bool:
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise argparse.ArgumentTypeError(f"expected true or false, received {text!r}")


def _scale_tier(text: str) -> str:
    """gcloud spells tiers ``basic-gpu``; the API (and a config file) ``BASIC_GPU``."""
    return text.upper().replace("-", "_")


def _accelerator(text: str) -> dict[str, Any]:
    """``count=1,type=nvidia-tesla-t4`` -> ``{"count": 1, "type": "NVIDIA_TESLA_T4"}`` (gcloud's parsing)."""
    match = _ACCELERATOR.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected count=COUNT,type=TYPE (e.g. count=1,type=nvidia-tesla-t4), "
                                         f"received {text!r}")
    count, kind = match.group("count") or match.group("count2"), match.group("type") or match.group("type2")
    out: dict[str, Any] = {}
    if count is not None:
        out["count"] = int(count)
    if kind is not None:
        out["type"] = kind.upper().replace("-", "_")
    return out


def _labels(text: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if any(len(pair) != 2 for pair in pairs):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...], received {text!r}")
    return {key: value for key, value in pairs}


def add_gcloud_training_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of gcloud's ``jobs submit training`` reference, in its groups."""
    flags = parser.add_argument_group("flags (gcloud's: each overrides the same field of --config, or is recorded "
                                      "with a note that it has no effect here)")
    flags.add_argument("--config", help="CMLE job config (trainingInput:) or Vertex workerPoolSpecs, YAML or JSON")
    flags.add_argument("--enable-web-access", action="store_true", default=None,
                       help="trainingInput.enableWebAccess: recorded, no effect here (no interactive shell)")
    flags.add_argument("--job-dir", help="output directory passed to the trainer as --job-dir (created before the "
                                         "tasks start)")
    flags.add_argument("--labels", type=_labels, metavar="KEY=VALUE,...",
                       help="the job's labels (replace the config's, as with gcloud)")
    flags.add_argument("--module-name", help="trainer module, e.g. trainer.task")
    flags.add_argument("--network", help="trainingInput.network (gcloud beta): recorded, no effect here")
    flags.add_argument("--package-path", help="local directory of the trainer package")
    flags.add_argument("--packages", help="comma-separated packages: local archives or directories on PYTHONPATH")
    flags.add_argument("--python-version", help="Python MAJOR.MINOR; a warning when it differs from this one")
    flags.add_argument("--region", help="recorded with the job (has no local meaning)")
    flags.add_argument("--runtime-version", help="TensorFlow MAJOR.MINOR (picks the Kubernetes image)")
    flags.add_argument("--scale-tier", type=_scale_tier,
                       help="basic, basic-gpu, standard-1, premium-1 or custom (either spelling: BASIC_GPU)")
    flags.add_argument("--service-account", help="trainingInput.serviceAccount: recorded, no effect here")
    flags.add_argument("--staging-bucket", help="gcloud uploads the package there: recorded, no effect here "
                                                "(tasks run the local package)")
    flags.add_argument("--tpu-tf-version", help="(gcloud beta) recorded, no effect here: no TPUs")
    flags.add_argument("--use-chief-in-tf-config", type=_bool, nargs="?", const=True, default=None,
                       metavar="BOOL", help="true: TF_CONFIG names the primary task `chief`; false (the default): "
                                            "`master`, as on CMLE")
    for role, (count_key, _, _) in _ROLES.items():
        group = flags if count_key is None else parser.add_argument_group(
            f"configure {role.replace('-', ' ')} settings" + (" (tfdist's: the config's evaluator fields)"
                                                              if role == "evaluator" else ""))
        if count_key is not None:
            group.add_argument(f"--{role}-count", type=task_count, help=f"trainingInput.{count_key}")
        group.add_argument(f"--{role}-machine-type", help=f"trainingInput.{_ROLES[role][1]} (a machine type)")
        group.add_argument(f"--{role}-accelerator", type=_accelerator, metavar="count=COUNT,type=TYPE",
                           help=f"trainingInput.{_ROLES[role][2]}.acceleratorConfig")
        group.add_argument(f"--{role}-image-uri", help=f"trainingInput.{_ROLES[role][2]}.imageUri")
    follow = parser.add_argument_group("at most one of these can be specified").add_mutually_exclusive_group()
    follow.add_argument("--async", dest="async_", action="store_true",
                        help="return once the job is submitted (the default, as with gcloud)")
    follow.add_argument("--stream-logs", action="store_true",
                        help="follow the logs until the job ends; the exit code is the job's outcome")
    kms = parser.add_argument_group("key resource: the Cloud KMS key of the job (recorded as "
                                    "encryptionConfig.kmsKeyName, no effect here)")
    for part in ("key", "keyring", "location", "project"):
        kms.add_argument(f"--kms-{part}", help=f"the KMS {part}" + (": an ID or the full resource name"
                                                                      if part == "key" else ""))
    wide = parser.add_argument_group("gcloud-wide flags (recorded, no effect here)")
    for flag in GCLOUD_WIDE_FLAGS:
        dest = f"gcloud_{flag[2:].replace('-', '_')}"
        if flag in ("--quiet", "--log-http"):
            wide.add_argument(flag, dest=dest, action="store_true", default=None)
        else:
            wide.add_argument(flag, dest=dest, metavar=flag[2:].upper().replace("-", "_"))
    wide.add_argument("--flags-file", dest="gcloud_flags_file", metavar="YAML_FILE",
                      help="refused: tfdist does not read it; write the flags on the command line")


#: every flag of gcloud's reference that the parser takes (tests feed them all)
GCLOUD_SUBMIT_FLAGS = (
    "--config", "--enable-web-access", "--job-dir", "--labels", "--master-accelerator", "--master-image-uri",
    "--master-machine-type", "--module-name", "--network", "--package-path", "--packages",
    "--parameter-server-accelerator", "--parameter-server-image-uri", "--python-version", "--region",
    "--runtime-version", "--scale-tier", "--service-account", "--staging-bucket", "--tpu-tf-version",
    "--use-chief-in-tf-config", "--worker-accelerator", "--worker-image-uri", "--async", "--stream-logs",
    "--kms-key", "--kms-keyring", "--kms-location", "--kms-project", "--parameter-server-count",
    "--parameter-server-machine-type", "--worker-count", "--worker-machine-type") + GCLOUD_WIDE_FLAGS


def _kms_key_name(args: argparse.Namespace) -> str | None:
    """gcloud's key resource: a full name, or an ID completed by --kms-keyring/-location/-project."""
    if args.kms_key is None:
        return None
    if args.kms_key.startswith("projects/"):
        return str(args.kms_key)
    parts = (("projects", args.kms_project), ("locations", args.kms_location), ("keyRings", args.kms_keyring))
    return "/".join(f"{kind}/{value or '-'}" for kind, value in parts) + f"/cryptoKeys/{args.kms_key}"


def gcloud_submission(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str] | None, dict[str, str]]:
    """(trainingInput overrides, labels or None, gcloud's own flags) from the parsed flags."""
    if getattr(args, "gcloud_flags_file", None):
        raise argparse.ArgumentTypeError("--flags-file is not read by tfdist; write the flags on the command line")
    overrides: dict[str, Any] = {field: getattr(args, flag) for flag, field in _FIELDS.items()
                                 if getattr(args, flag) is not None}
    if args.packages:
        overrides["packageUris"] = args.packages.split(",")
    if args.user_args:
        overrides["args"] = list(args.user_args)
    if args.enable_web_access:
        overrides["enableWebAccess"] = True
    kms = _kms_key_name(args)
    if kms is not None:
        overrides["encryptionConfig"] = {"kmsKeyName": kms}
    for role, (count_key, type_key, config_key) in _ROLES.items():
        attr = role.replace("-", "_")
        if count_key is not None and getattr(args, f"{attr}_count") is not None:
            overrides[count_key] = getattr(args, f"{attr}_count")
        if getattr(args, f"{attr}_machine_type") is not None:
            overrides[type_key] = getattr(args, f"{attr}_machine_type")
        config = {key: value for key, value in (("acceleratorConfig", getattr(args, f"{attr}_accelerator")),
                                                ("imageUri", getattr(args, f"{attr}_image_uri")))
                  if value is not None}
        if config:
            overrides[config_key] = config
    own = {flag: str(getattr(args, attr)) for attr, flag in _GCLOUD_ONLY.items() if getattr(args, attr) is not None}
    for flag in GCLOUD_WIDE_FLAGS:
        value = getattr(args, f"gcloud_{flag[2:].replace('-', '_')}")
        if value is not None:
            own[flag] = "true" if value is True else str(value)
    return overrides, args.labels, own
