"""Regenerate ``schemas/katib-experiment-v1beta1.json`` from Katib's published API models.

Katib's Experiment CRD declares almost nothing itself (its ``spec`` preserves
unknown fields; the controller's Go types and webhook do the checking), so the
schema tfdist validates against is built from the API types as the Kubeflow
``kubeflow-katib-api`` package publishes them (pydantic models generated from
Katib's OpenAPI spec), pruned to what a rendered Experiment contains:

* every ``V1beta1*`` object the Experiment's ``spec`` reaches, field names and
  types as published; unknown fields are errors (as under strict validation);
* the enumerations of Katib's Go constants (``common_types.go``,
  ``experiment_types.go``), which the generated models leave as plain strings;
* ``trialTemplate.trialSpec`` stays an open object: the TFJob inside it is
  checked against the TFJob CRD by ``validate_tfjob``;
* pruned: ``status``, NAS config, a custom collector container, an HTTP source.

Usage (with ``kubeflow-katib-api`` importable)::

    python tools/extract_katib_schema.py
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "toolkit" / "jobs" / "schemas" / "katib-experiment-v1beta1.json"

# Katib's Go constants the generated models do not carry.
ENUMS = {
    ("V1beta1ObjectiveSpec", "type"): ["minimize", "maximize"],
    ("V1beta1MetricStrategy", "value"): ["min", "max", "latest"],
    ("V1beta1ParameterSpec", "parameterType"): ["double", "int", "discrete", "categorical"],
    ("V1beta1FeasibleSpace", "distribution"): ["uniform", "logUniform", "normal", "logNormal"],
    ("V1beta1CollectorSpec", "kind"): ["StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom", "None"],
    ("V1beta1FileSystemPath", "kind"): ["Directory", "File"],
    ("V1beta1FileSystemPath", "format"): ["TEXT", "JSON"],
    ("V1beta1ExperimentSpec", "resumePolicy"): ["Never", "LongRunning", "FromVolume"],
}
PRUNED = {("V1beta1ExperimentSpec", "nasConfig"), ("V1beta1CollectorSpec", "customCollector"),
          ("V1beta1SourceSpec", "httpGet"), ("V1beta1TrialTemplate", "configMap")}
_DROP_KEYS = ("description", "title", "default")


def _plain(node: Any, *, names: bool = False) -> Any:
    """pydantic's ``anyOf: [X, null]`` becomes X; titles, descriptions and defaults go (not fields so
    named: ``names`` is set for a ``properties`` mapping, whose keys are field names)."""
    if isinstance(node, dict):
        if names:
            return {k: _plain(v) for k, v in node.items()}
        options = node.get("anyOf")
        if options and len(options) == 2 and {"type": "null"} in options:
            node = {**{k: v for k, v in node.items() if k != "anyOf"},
                    **next(o for o in options if o != {"type": "null"})}
        return {k: _plain(v, names=k == "properties") for k, v in node.items() if k not in _DROP_KEYS}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _definition(defs: dict[str, Any], name: str, keep: set[str]) -> dict[str, Any]:
    node = _plain(defs[name])
    props = {k: v for k, v in node.get("properties", {}).items() if (name, k) not in PRUNED}
    for (owner, field), values in ENUMS.items():
        if owner == name:
            props[field] = {**props[field], "enum": values}
    for prop in props.values():
        for ref in _refs(prop):
            keep.add(ref)
    return {**node, "properties": props, "additionalProperties": False}


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        ref = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        return ref + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def extract() -> dict[str, Any]:
    """The pruned JSON schema of a Katib ``v1beta1`` Experiment."""
    from kubeflow_katib_api.models.v1beta1_experiment import V1beta1Experiment

    defs = V1beta1Experiment.model_json_schema(by_alias=True)["$defs"]
    keep: set[str] = {"V1beta1ExperimentSpec"}
    done: set[str] = set()
    out: dict[str, Any] = {}
    while keep - done:
        name = sorted(keep - done)[0]
        done.add(name)
        out[name] = _definition(defs, name, keep)
    metadata = {"type": "object", "additionalProperties": False, "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}
    return {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
            "properties": {"apiVersion": {"const": "kubeflow.org/v1beta1"}, "kind": {"const": "Experiment"},
                           "metadata": metadata, "spec": {"$ref": "#/definitions/V1beta1ExperimentSpec"}},
            "definitions": json.loads(json.dumps(out).replace("#/$defs/", "#/definitions/"))}


def main() -> None:
    SCHEMA_PATH.write_text(json.dumps(extract(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
