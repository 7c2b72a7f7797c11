"""Regenerate ``schemas/tfjob-v1.json`` from the Kubeflow TFJob CRD.

The CRD (``kubeflow.org_tfjobs.yaml`` from the training-operator release) is
half a megabyte, almost all of it the Kubernetes pod spec. tfdist renders a small
part of that spec, so the embedded schema keeps exactly that part and drops
everything a rendered manifest never contains. The pruned schema is still the
CRD's own text for every field it keeps, so it rejects what the API server
would reject for those fields.

Usage::

    python tools/extract_tfjob_schema.py path/to/kubeflow.org_tfjobs.yaml
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "toolkit" / "jobs" / "schemas" / "tfjob-v1.json"

# Pod spec fields a tfdist manifest may contain; every other pod field is pruned.
KEPT_POD_FIELDS = ("containers", "restartPolicy", "nodeSelector", "serviceAccountName",
                   "terminationGracePeriodSeconds")
# Container fields a tfdist manifest may contain.
KEPT_CONTAINER_FIELDS = ("name", "image", "imagePullPolicy", "command", "args", "env",
                         "ports", "resources", "workingDir")


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def _keep(properties: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    missing = [n for n in names if n not in properties]
    if missing:
        raise ValueError(f"the CRD has no field(s) {missing}; is this a TFJob v1 CRD?")
    return {n: properties[n] for n in names}


def extract(crd: dict[str, Any]) -> dict[str, Any]:
    """Returns the pruned ``openAPIV3Schema`` of the CRD's ``v1`` version."""
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    schema = _strip_descriptions(versions["v1"]["schema"]["openAPIV3Schema"])
    replica = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    pod = replica["properties"]["template"]["properties"]["spec"]
    pod["properties"] = _keep(pod["properties"], KEPT_POD_FIELDS)
    container = pod["properties"]["containers"]["items"]
    container["properties"] = _keep(container["properties"], KEPT_CONTAINER_FIELDS)
    return {
        "$comment": ("Pruned from the kubeflow.org TFJob CRD (training-operator v1.9), version v1; "
                     "see README.md in this directory."),
        **schema,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd", type=Path, help="the TFJob CRD YAML file")
    parser.add_argument("--output", type=Path, default=SCHEMA_PATH)
    args = parser.parse_args(argv)
    with args.crd.open(encoding="utf-8") as fh:
        crd = yaml.safe_load(fh)
    text = json.dumps(extract(crd), indent=1, sort_keys=True)
    args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
