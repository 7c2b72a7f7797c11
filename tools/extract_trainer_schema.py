"""Regenerate ``schemas/trainjob-v1alpha1.json`` and ``schemas/clustertrainingruntime-v1alpha1.json``.

From Kubeflow Trainer v2's CRDs (``trainer.kubeflow.org_trainjobs.yaml`` and
``trainer.kubeflow.org_clustertrainingruntimes.yaml``, Apache-2.0). As for the
TFJob schema (``extract_tfjob_schema``), the embedded copies keep the CRD's own text
for every field a tfdist manifest may contain and prune the rest: descriptions,
the pod spec's other fields, the containers' other fields, ``status``.

Usage::

    python tools/extract_trainer_schema.py TRAINJOBS_CRD.yaml CLUSTERTRAININGRUNTIMES_CRD.yaml
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml
from extract_tfjob_schema import KEPT_CONTAINER_FIELDS, KEPT_POD_FIELDS, _keep, _strip_descriptions

SCHEMAS = Path(__file__).resolve().parents[1] / "toolkit" / "jobs" / "schemas"
TRAINJOB_PATH = SCHEMAS / "trainjob-v1alpha1.json"
RUNTIME_PATH = SCHEMAS / "clustertrainingruntime-v1alpha1.json"
TRAINJOB_FIELDS = ("activeDeadlineSeconds", "runtimeRef", "suspend", "trainer")
RUNTIME_FIELDS = ("mlPolicy", "template")
JOBSET_FIELDS = ("network", "replicatedJobs", "successPolicy", "failurePolicy")
JOB_FIELDS = ("backoffLimit", "completionMode", "completions", "parallelism", "template")


def _v1alpha1(crd: dict[str, Any]) -> dict[str, Any]:
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    schema = _strip_descriptions(versions["v1alpha1"]["schema"]["openAPIV3Schema"])
    schema["properties"].pop("status", None)
    return schema


def extract_trainjob(crd: dict[str, Any]) -> dict[str, Any]:
    schema = _v1alpha1(crd)
    spec = schema["properties"]["spec"]
    spec["properties"] = _keep(spec["properties"], TRAINJOB_FIELDS)
    return {"$comment": "Pruned from Kubeflow Trainer's TrainJob CRD, v1alpha1; see README.md.", **schema}


def extract_runtime(crd: dict[str, Any]) -> dict[str, Any]:
    schema = _v1alpha1(crd)
    spec = schema["properties"]["spec"]
    spec["properties"] = _keep(spec["properties"], RUNTIME_FIELDS)
    jobset = spec["properties"]["template"]["properties"]["spec"]
    jobset["properties"] = _keep(jobset["properties"], JOBSET_FIELDS)
    job = jobset["properties"]["replicatedJobs"]["items"]["properties"]["template"]["properties"]["spec"]
    job["properties"] = _keep(job["properties"], JOB_FIELDS)
    pod = job["properties"]["template"]["properties"]["spec"]
    pod["properties"] = _keep(pod["properties"], KEPT_POD_FIELDS)
    container = pod["properties"]["containers"]["items"]
    container["properties"] = _keep(container["properties"], KEPT_CONTAINER_FIELDS)
    return {"$comment": "Pruned from Kubeflow Trainer's ClusterTrainingRuntime CRD, v1alpha1; see README.md.",
            **schema}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trainjobs", type=Path)
    parser.add_argument("runtimes", type=Path)
    args = parser.parse_args(argv)
    for source, extract, target in ((args.trainjobs, extract_trainjob, TRAINJOB_PATH),
                                    (args.runtimes, extract_runtime, RUNTIME_PATH)):
        with source.open(encoding="utf-8") as fh:
            crd = yaml.safe_load(fh)
        target.write_text(json.dumps(extract(crd), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
