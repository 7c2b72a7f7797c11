"""Reads and writes CMLE job configs (``jobId``, ``labels``, ``trainingInput``)."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from toolkit.jobs.errors import did_you_mean
from toolkit.jobs.model._fields import FieldReader
from toolkit.jobs.model._training_input import MODULE_PATTERN, ROLE_FIELDS, ReplicaConfig
from toolkit.jobs.model.hyperparams import read_hyperparameters
from toolkit.jobs.model.tiers import MACHINE_TYPE_HELP, MACHINE_TYPES, SCALE_TIERS, machine_for

_TOP_KEYS = ("jobId", "labels", "trainingInput")
# What `gcloud ai-platform jobs describe --format json` adds: CMLE fills these in, a new job ignores them.
_OUTPUT_KEYS = ("createTime", "startTime", "endTime", "state", "errorMessage", "etag",
                "trainingOutput", "predictionOutput", "jobPosition")
#: what a recorded field's warning says: kept, shown by describe, and of no effect
NO_EFFECT = "is recorded with the job; it has no effect on this backend."
# Accepted, kept in TrainingInput.recorded, not acted on.
RECORDED_KEYS = ("serviceAccount", "network", "encryptionConfig", "enableWebAccess")
# ReplicaConfig fields recorded the same way (as "<role>Config.<field>").
_RECORDED_CONFIG_KEYS = ("diskConfig", "tpuTfVersion")
TPU_MACHINE_TYPES = ("cloud_tpu", "standard_tpu", "basic_tpu", "cloud-tpu")  # the last: Vertex's name
TPU_BACKENDS = "the local and kubernetes backends"
_TI_KEYS = (("scaleTier", "pythonModule", "packageUris", "packagePath", "args", "jobDir", "region",
             "runtimeVersion", "pythonVersion", "useChiefInTfConfig", "hyperparameters",
             "scheduling") + RECORDED_KEYS
            + tuple(k for keys in ROLE_FIELDS.values() for k in keys if k))
_CONFIG_KEYS = ("imageUri", "acceleratorConfig") + _RECORDED_CONFIG_KEYS
_NO_COMMAND = ("is not supported: every task runs `python -m <pythonModule> <args>`. Remove it and "
               "put the arguments in trainingInput.args.")
_DURATION = re.compile(r"(\d+(\.\d+)?)s")
MAX_RUNNING_SECONDS = 366 * 24 * 3600  # bounded before float() and ceil(): 400 digits overflow to infinity
_VERSION = re.compile(r"\d+\.\d+")
_ACCELERATOR = re.compile(r"[A-Z][A-Z0-9_]*")


def read_cmle(reader: FieldReader, doc: Mapping[str, Any],
              overrides: Mapping[str, Any]) -> tuple[dict[str, Any], object, object]:
    """Returns TrainingInput keyword arguments, the raw labels and the raw jobId."""
    if "predictionInput" in doc:
        reader.fail("predictionInput", "is a batch prediction job; tfdist runs training jobs only. "
                                       "Submit it to a prediction service, or give a trainingInput.")
    for key in _OUTPUT_KEYS:
        if key in doc:
            reader.warn(key, "is an output field CMLE fills in for a submitted job; it is ignored.")
    reader.check_keys({k: v for k, v in doc.items() if k not in (*_OUTPUT_KEYS, "predictionInput")}, "", _TOP_KEYS)
    ti = merge_overrides(reader.mapping(doc.get("trainingInput"), "trainingInput"), overrides)
    return read_training_input(reader, ti, "trainingInput"), doc.get("labels"), doc.get("jobId")


def merge_overrides(ti: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``ti`` with ``overrides`` applied as gcloud applies its flags to ``--config``.

    A flag replaces its field; a flag of a replica's config (``--worker-image-uri``
    sets ``workerConfig.imageUri``) replaces that key only, so the file's other
    keys of ``workerConfig`` stay.
    """
    merged = dict(ti)
    for key, value in overrides.items():
        if key.endswith("Config") and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def read_training_input(reader: FieldReader, ti: Mapping[str, Any], path: str) -> dict[str, Any]:
    reader.check_keys(ti, path, _TI_KEYS)
    if isinstance(ti.get("scaleTier"), str) and ti["scaleTier"].upper() == "BASIC_TPU":
        reader.fail(f"{path}.scaleTier", f"is BASIC_TPU: TPU jobs cannot run on {TPU_BACKENDS}, which "
                                         "have no TPUs. Use BASIC, BASIC_GPU or CUSTOM with CPU or GPU machines.")
        ti = {k: v for k, v in ti.items() if k != "scaleTier"}
    tier = reader.choice(ti, "scaleTier", path, SCALE_TIERS, default="BASIC")
    recorded: dict[str, Any] = {}
    replicas = _read_replicas(reader, ti, path, tier, recorded)
    module = reader.string(ti, "pythonModule", path, pattern=MODULE_PATTERN,
                           expected="a dotted Python module name such as trainer.task",
                           fix="Name the module that `python -m` should run.")
    if "pythonModule" not in ti and not replicas["master"].image_uri:
        reader.error(f"{path}.pythonModule", None,
                     "the trainer module, run in every task as `python -m MODULE`",
                     "Add `pythonModule: trainer.task`, or pass pythonModule in `overrides`.")
    use_chief = reader.boolean(ti, "useChiefInTfConfig", path, default=False)
    if replicas["evaluator"].count and not use_chief:
        reader.fail(f"{path}.evaluatorCount", "is 1 but useChiefInTfConfig is false, so TF_CONFIG would name "
                                              "the primary task `master`, and TensorFlow cannot run an evaluator "
                                              "beside a master. Set `useChiefInTfConfig: true`.")
    if not use_chief and (replicas["worker"].count or replicas["parameter_server"].count):
        reader.warn(f"{path}.useChiefInTfConfig", "is false, so TF_CONFIG names the primary task `master` "
                    "(CMLE's default). TF2 distribution strategies need `chief`: set `useChiefInTfConfig: true` "
                    "unless the trainer expects `master`.")
    for key in RECORDED_KEYS:
        if key in ti:
            recorded[key] = ti[key]
            reader.warn(f"{path}.{key}", NO_EFFECT)
    max_running = _read_scheduling(reader, ti.get("scheduling"), f"{path}.scheduling", recorded)
    return dict(
        python_module=module, scale_tier=tier or "BASIC", **replicas,
        package_uris=reader.string_list(ti, "packageUris", path),
        package_path=reader.string(ti, "packagePath", path),
        args=reader.string_list(ti, "args", path, scalars_ok=True),
        job_dir=reader.string(ti, "jobDir", path),
        region=reader.string(ti, "region", path),
        runtime_version=reader.string(ti, "runtimeVersion", path, pattern=_VERSION,
                                      expected="a MAJOR.MINOR version such as '2.21'",
                                      fix="Quote it so YAML keeps it as text."),
        python_version=reader.string(ti, "pythonVersion", path, pattern=_VERSION,
                                     expected="a MAJOR.MINOR version such as '3.11'",
                                     fix="Quote it so YAML keeps it as text."),
        use_chief_in_tf_config=use_chief,
        hyperparameters=read_hyperparameters(reader, ti.get("hyperparameters"), f"{path}.hyperparameters"),
        max_running_seconds=max_running, recorded=recorded,
    )


def _read_replicas(reader: FieldReader, ti: Mapping[str, Any], path: str,
                   tier: str | None, recorded: dict[str, Any]) -> dict[str, ReplicaConfig]:
    preset = SCALE_TIERS.get(tier or "BASIC")
    out = {}
    for role, (count_key, type_key, config_key) in ROLE_FIELDS.items():
        machine = read_machine_type(reader, ti, type_key, path)
        image, accel_type, accel_count = _read_config(reader, ti.get(config_key), f"{path}.{config_key}")
        config = ti.get(config_key)
        for key in _RECORDED_CONFIG_KEYS:
            if isinstance(config, Mapping) and key in config:
                recorded[f"{config_key}.{key}"] = config[key]
                reader.warn(f"{path}.{config_key}.{key}", NO_EFFECT)
        if preset is None:
            count = 1 if count_key is None else _read_count(reader, ti, count_key, path)
            if count and type_key not in ti:
                what = "the master" if count_key is None else f"{count_key} {count}"
                reader.missing(f"{path}.{type_key}", f"a machine type, because scaleTier is CUSTOM "
                               f"and {what} needs one", f"Add `{type_key}: standard` (valid: {MACHINE_TYPE_HELP}).")
            elif not count and type_key in ti:
                reader.warn(f"{path}.{type_key}", f"is set but {count_key} is 0, so no such task runs.")
        else:
            count = 1 if count_key is None else getattr(preset, _PRESET_COUNT[role])
            if count_key is not None and count_key in ti:
                reader.error(f"{path}.{count_key}", ti[count_key], f"no {count_key}, because "
                             f"scaleTier {tier} fixes the counts (1 master, {preset.workers} workers, "
                             f"{preset.parameter_servers} ps)",
                             f"Set `scaleTier: CUSTOM` to choose counts, or remove {count_key}.")
            if type_key in ti:
                reader.warn(f"{path}.{type_key}", f"is ignored: scaleTier {tier} sets the machines.")
            machine = (getattr(preset, _PRESET_TYPE[role]) or preset.master_type) if count else None
        out[role] = ReplicaConfig(count, machine, image, accel_type, accel_count)
    return out


_PRESET_COUNT = {"worker": "workers", "parameter_server": "parameter_servers", "evaluator": "evaluators"}
_PRESET_TYPE = {"master": "master_type", "worker": "worker_type",
                "parameter_server": "parameter_server_type", "evaluator": "master_type"}


def _read_count(reader: FieldReader, ti: Mapping[str, Any], key: str, path: str) -> int:
    if key == "evaluatorCount":
        fix = "TensorFlow runs at most one evaluator (its task index must be 0). Set evaluatorCount to 0 or 1."
        return reader.integer(ti, key, path, default=0, minimum=0, maximum=1, fix=fix) or 0
    return reader.integer(ti, key, path, default=0, minimum=0,
                          fix=f"Set {key} to 0 or more (tasks besides the master).") or 0


def read_machine_type(reader: FieldReader, doc: Mapping[str, Any], key: str, path: str) -> str | None:
    name = reader.string(doc, key, path)
    if name is not None and name.lower() in TPU_MACHINE_TYPES:
        reader.fail(f"{path}.{key}", f"is {name!r}, a TPU machine: TPU jobs cannot run on {TPU_BACKENDS}, "
                                     f"which have no TPUs. Use a CPU or GPU machine type ({MACHINE_TYPE_HELP}).")
        return None
    if name is not None and machine_for(name) is None:
        reader.error(f"{path}.{key}", name, f"a known machine type ({MACHINE_TYPE_HELP})",
                     f"Pick one of those.{did_you_mean(name, MACHINE_TYPES)}")
        return None
    return name


def _read_config(reader: FieldReader, value: object, path: str) -> tuple[str | None, str | None, int]:
    doc = dict(reader.mapping(value, path))
    for key in ("containerCommand", "containerArgs"):
        if doc.pop(key, None) is not None:
            reader.fail(f"{path}.{key}", _NO_COMMAND)
    reader.check_keys(doc, path, _CONFIG_KEYS)
    image = reader.string(doc, "imageUri", path)
    accel = reader.mapping(doc.get("acceleratorConfig"), f"{path}.acceleratorConfig")
    reader.check_keys(accel, f"{path}.acceleratorConfig", ("count", "type"))
    count = reader.integer(accel, "count", f"{path}.acceleratorConfig", default=0, minimum=1) or 0
    kind = reader.string(accel, "type", f"{path}.acceleratorConfig", pattern=_ACCELERATOR,
                         expected="an accelerator name such as NVIDIA_TESLA_T4")
    if kind is not None and kind.startswith("TPU"):
        reader.fail(f"{path}.acceleratorConfig.type", f"is {kind!r}: TPU jobs cannot run on {TPU_BACKENDS}, "
                                                      "which have no TPUs. Use a GPU such as NVIDIA_TESLA_T4.")
        kind = None
    if accel and (not count or not kind):
        reader.fail(f"{path}.acceleratorConfig", "needs both `count` and `type`, e.g. "
                                                 "{count: 1, type: NVIDIA_TESLA_T4}.")
    return image, kind, count


def _read_scheduling(reader: FieldReader, value: object, path: str, recorded: dict[str, Any]) -> int | None:
    doc = reader.mapping(value, path)
    reader.check_keys(doc, path, ("maxRunningTime", "maxWaitTime", "priority"))
    if "maxWaitTime" in doc:
        recorded["scheduling.maxWaitTime"] = doc["maxWaitTime"]
        reader.warn(f"{path}.maxWaitTime", "is recorded but tfdist starts jobs at once.")
    if "priority" in doc:
        recorded["scheduling.priority"] = doc["priority"]
        reader.warn(f"{path}.priority", "is recorded but tfdist runs every job as soon as it is submitted.")
    if "maxRunningTime" not in doc:
        return None
    text = doc["maxRunningTime"]
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None or len(match.group(1)) > 20 or not 0 < float(match.group(1)) <= MAX_RUNNING_SECONDS:
        reader.error(f"{path}.maxRunningTime", text[:40] if isinstance(text, str) else text,
                     f"a duration in seconds such as '7200s', at most {MAX_RUNNING_SECONDS:,}s (a year)",
                     "Write the number of seconds followed by 's'.")
        return None
    return math.ceil(float(match.group(1)))
