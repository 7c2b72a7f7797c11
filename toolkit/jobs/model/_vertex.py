"""Reads Vertex AI custom job configs (``workerPoolSpecs``) into TrainingInput fields.

Vertex numbers its pools: 0 is the primary replica (one task), 1 the workers,
2 the parameter servers, 3 the evaluators, and it names the primary ``chief``
in TF_CONFIG. tfdist runs one trainer module in every task, so the pools must
agree on the module and its arguments.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkit.jobs.model._cmle import TPU_BACKENDS, read_machine_type
from toolkit.jobs.model._fields import FieldReader
from toolkit.jobs.model._training_input import MODULE_PATTERN, ReplicaConfig

_ROLES = ("master", "worker", "parameter_server", "evaluator")
_POOL_KEYS = ("machineSpec", "replicaCount", "pythonPackageSpec", "containerSpec", "diskSpec", "nfsMounts")
_RECORDED_POOL_KEYS = ("diskSpec", "nfsMounts")
_JOB_SPEC_KEYS = ("workerPoolSpecs", "baseOutputDirectory", "scheduling", "serviceAccount", "network",
                  "enableWebAccess", "enableDashboardAccess", "tensorboard", "reservedIpRanges")
_RECORDED_JOB_KEYS = _JOB_SPEC_KEYS[3:]
_UNSUPPORTED = "is not supported: every task runs `python -m <pythonModule> <args>`. Use pythonPackageSpec."


def is_vertex(doc: Mapping[str, Any]) -> bool:
    return "workerPoolSpecs" in doc or "jobSpec" in doc


def read_vertex(reader: FieldReader, doc: Mapping[str, Any],
                overrides: Mapping[str, Any]) -> tuple[dict[str, Any], object, object]:
    """Returns TrainingInput keyword arguments, the raw labels and the raw job name."""
    if "jobSpec" in doc:
        reader.check_keys(doc, "", ("displayName", "labels", "jobSpec"))
        spec, path = reader.mapping(doc["jobSpec"], "jobSpec"), "jobSpec"
    else:
        reader.check_keys(doc, "", _JOB_SPEC_KEYS + ("displayName", "labels"))
        spec, path = doc, ""
    prefix = f"{path}." if path else ""
    if path:
        reader.check_keys(spec, path, _JOB_SPEC_KEYS)
    pools = spec.get("workerPoolSpecs")
    if not isinstance(pools, list) or not 1 <= len(pools) <= 4:
        reader.error(f"{prefix}workerPoolSpecs", pools, "a list of 1 to 4 pools (primary, workers, ps, "
                     "evaluators)", "Give at least pool 0 with replicaCount 1.")
        pools = []
    kwargs = _read_pools(reader, pools, f"{prefix}workerPoolSpecs")
    kwargs["job_dir"] = _read_output_dir(reader, spec.get("baseOutputDirectory"), f"{prefix}baseOutputDirectory")
    kwargs["max_running_seconds"] = _read_timeout(reader, spec.get("scheduling"), f"{prefix}scheduling")
    recorded = {k: spec[k] for k in _RECORDED_JOB_KEYS if k in spec}
    for key in recorded:
        reader.warn(f"{prefix}{key}", "is recorded with the job; it has no effect on this backend.")
    kwargs["recorded"] = {**kwargs.get("recorded", {}), **recorded}
    kwargs.update(_translate_overrides(reader, overrides))
    if kwargs["python_module"] is None and not kwargs["master"].image_uri:
        reader.missing(f"{prefix}workerPoolSpecs[0].pythonPackageSpec.pythonModule", "the trainer module",
                     "Add pythonPackageSpec.pythonModule (e.g. trainer.task), or pass pythonModule in `overrides`.")
    return kwargs, doc.get("labels"), doc.get("displayName")


def _read_pools(reader: FieldReader, pools: list, path: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"scale_tier": "CUSTOM", "use_chief_in_tf_config": True, "recorded": {}}
    entry: tuple[str | None, tuple[str, ...], tuple[str, ...]] | None = None
    for i, role in enumerate(_ROLES):
        where = f"{path}[{i}]"
        pool = reader.mapping(pools[i], where) if i < len(pools) else {}
        reader.check_keys(pool, where, _POOL_KEYS)
        count = reader.integer(pool, "replicaCount", where, default=1 if i == 0 and pool else 0,
                               minimum=1 if i == 0 else 0, maximum=1 if i in (0, 3) else None,
                               fix="Pool 0 is the one primary task and pool 3 at most one evaluator; "
                                   "set replicaCount accordingly." if i in (0, 3) else "")
        machine_spec = reader.mapping(pool.get("machineSpec"), f"{where}.machineSpec")
        reader.check_keys(machine_spec, f"{where}.machineSpec", ("machineType", "acceleratorType", "acceleratorCount"))
        machine = read_machine_type(reader, machine_spec, "machineType", f"{where}.machineSpec")
        accelerator = machine_spec.get("acceleratorType")
        if isinstance(accelerator, str) and accelerator.upper().startswith("TPU"):
            reader.fail(f"{where}.machineSpec.acceleratorType", f"is {accelerator!r}: TPU jobs cannot run on "
                        f"{TPU_BACKENDS}, which have no TPUs. Use a GPU such as NVIDIA_TESLA_T4.")
        image, pool_entry = _read_entrypoint(reader, pool, where)
        if pool and count and entry is not None and pool_entry[:2] != entry[:2] and pool_entry[0] is not None:
            reader.fail(where, f"runs {pool_entry[0]!r} with args {list(pool_entry[1])}, but pool 0 runs "
                               f"{entry[0]!r} with args {list(entry[1])}; tfdist runs one module in every task. "
                               "Make the pools agree.")
        entry = entry or pool_entry
        for key in _RECORDED_POOL_KEYS:
            if key in pool:
                kwargs["recorded"][f"{where}.{key}"] = pool[key]
        kwargs[role] = ReplicaConfig(
            count or 0, machine, image, machine_spec.get("acceleratorType"),
            reader.integer(machine_spec, "acceleratorCount", f"{where}.machineSpec", default=0, minimum=0) or 0)
    module, args, uris = entry or (None, (), ())
    kwargs.update(python_module=module, args=args, package_uris=uris)
    return kwargs


def _read_entrypoint(reader: FieldReader, pool: Mapping[str, Any],
                     where: str) -> tuple[str | None, tuple[str | None, tuple[str, ...], tuple[str, ...]]]:
    package = reader.mapping(pool.get("pythonPackageSpec"), f"{where}.pythonPackageSpec")
    container = reader.mapping(pool.get("containerSpec"), f"{where}.containerSpec")
    for spec_path, spec in ((f"{where}.pythonPackageSpec", package), (f"{where}.containerSpec", container)):
        for key in ("command", "env"):
            if key in spec:
                reader.fail(f"{spec_path}.{key}", _UNSUPPORTED)
    package_path, container_path = f"{where}.pythonPackageSpec", f"{where}.containerSpec"
    reader.check_keys({k: v for k, v in package.items() if k not in ("command", "env")}, package_path,
                      ("executorImageUri", "packageUris", "pythonModule", "args"))
    reader.check_keys({k: v for k, v in container.items() if k not in ("command", "env")}, container_path,
                      ("imageUri", "args"))
    module = reader.string(package, "pythonModule", package_path, pattern=MODULE_PATTERN,
                           expected="a dotted Python module name such as trainer.task")
    args = reader.string_list(package, "args", package_path, scalars_ok=True) or \
        reader.string_list(container, "args", container_path, scalars_ok=True)
    image = reader.string(container, "imageUri", container_path) or \
        reader.string(package, "executorImageUri", package_path)
    return image, (module, args, reader.string_list(package, "packageUris", package_path))


def _read_output_dir(reader: FieldReader, value: object, path: str) -> str | None:
    doc = reader.mapping(value, path)
    reader.check_keys(doc, path, ("outputUriPrefix",))
    return reader.string(doc, "outputUriPrefix", path)


def _read_timeout(reader: FieldReader, value: object, path: str) -> int | None:
    doc = reader.mapping(value, path)
    reader.check_keys(doc, path, ("timeout", "restartJobOnWorkerRestart"))
    if "timeout" not in doc:
        return None
    text = doc["timeout"]
    if isinstance(text, str) and text.endswith("s") and text[:-1].isdigit() and int(text[:-1]) > 0:
        return int(text[:-1])
    reader.error(f"{path}.timeout", text, "a duration in seconds such as '7200s'",
                 "Write the number of seconds followed by 's'.")
    return None


# Command-line flags name CMLE fields; on a Vertex config they replace the pool-0 values.
_OVERRIDE_FIELDS = {"pythonModule": "python_module", "packagePath": "package_path", "jobDir": "job_dir",
                    "args": "args", "region": "region", "runtimeVersion": "runtime_version"}


def _translate_overrides(reader: FieldReader, overrides: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in _OVERRIDE_FIELDS:
            reader.fail(key, f"cannot override {key!r} on a workerPoolSpecs config; edit the pools instead.")
        else:
            out[_OVERRIDE_FIELDS[key]] = tuple(value) if key == "args" else value
    return out
