"""The job spec: what to run and on how many tasks, independent of the backend.

``JobSpec.from_dict`` / ``from_file`` accept a CMLE job config (``trainingInput:``)
or a Vertex AI custom job (``workerPoolSpecs:``) and turn either into the same
frozen ``JobSpec``. Every problem is collected and raised at once as
``JobSpecError``; fields that are legal but mean nothing to tfdist produce
warnings (``JobSpec.warnings``) and are kept in ``TrainingInput.recorded``.

Example:
    >>> spec = JobSpec.from_dict({"trainingInput": {
    ...     "scaleTier": "CUSTOM", "masterType": "standard", "workerType": "standard",
    ...     "workerCount": 2, "parameterServerType": "standard", "parameterServerCount": 1,
    ...     "pythonModule": "trainer.task"}})
    >>> spec.training_input.task_counts
    {'master': 1, 'worker': 2, 'ps': 1}
"""
from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolkit.jobs.errors import JobSpecError, Problem
from toolkit.jobs.model._cmle import read_cmle
from toolkit.jobs.model._fields import FieldReader
from toolkit.jobs.model._hygiene import check_values
from toolkit.jobs.model._training_input import MODULE_PATTERN, ReplicaConfig, TrainingInput
from toolkit.jobs.model._vertex import is_vertex, read_vertex
from toolkit.jobs.model.limits import check_limits
from toolkit.jobs.model.names import validate_job_name

__all__ = ["JobSpec", "TrainingInput", "ReplicaConfig", "MODULE_PATTERN"]

_LABEL = re.compile(r"[a-z]([-_a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([a-z0-9]([-_a-z0-9]{0,61}[a-z0-9])?)?")


@dataclass(frozen=True)
class JobSpec:
    """A submitted (or to-be-submitted) training job.

    Build one with ``from_dict`` or ``from_file``; both validate. ``overrides``
    are ``trainingInput`` fields given on the command line; they replace the
    file's values, as with gcloud.
    """

    training_input: TrainingInput
    job_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))
    source: str = "trainingInput"
    warnings: tuple[Problem, ...] = ()
    gcloud_flags: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.job_id is not None:
            validate_job_name(self.job_id, field="jobId")
        object.__setattr__(self, "labels", types.MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "gcloud_flags", types.MappingProxyType(dict(self.gcloud_flags)))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, job_id: str | None = None,
                  overrides: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None,
                  gcloud_flags: Mapping[str, str] | None = None) -> JobSpec:
        """Validates a parsed job config; raises ``JobSpecError`` listing every error.

        Args:
            overrides: ``trainingInput`` fields that replace the file's (gcloud's flags).
            labels: replace the file's ``labels`` (gcloud's ``--labels``).
            gcloud_flags: gcloud's own flags (``--staging-bucket``, ``--project``, ...), which
                mean nothing to a backend: kept with the job, each with a warning saying so.
        """
        unusable = check_values(doc) + check_values(overrides or {}, "trainingInput") + check_values(
            {"labels": labels or {}, "gcloudFlags": gcloud_flags or {}})
        if unusable:
            raise JobSpecError(unusable)
        reader = FieldReader()
        doc = dict(reader.mapping(doc, "job config"))
        if labels is not None:
            doc["labels"] = labels
        flags = _read_gcloud_flags(reader, {**reader.mapping(doc.pop("gcloudFlags", None), "gcloudFlags"),
                                            **(gcloud_flags or {})})
        vertex = is_vertex(doc)
        read = read_vertex if vertex else read_cmle
        kwargs, raw_labels, file_job_id = read(reader, doc, dict(overrides or {}))
        check_limits(reader, kwargs, vertex=vertex)
        good_labels = _read_labels(reader, raw_labels)
        name = _resolve_job_id(reader, job_id, file_job_id)
        if not reader.ok:
            raise JobSpecError(reader.problems)
        spec = cls(training_input=TrainingInput(**kwargs), job_id=name, labels=good_labels,
                   source="workerPoolSpecs" if vertex else "trainingInput",
                   warnings=tuple(reader.problems), gcloud_flags=flags)
        return spec

    @classmethod
    def from_file(cls, path: str | Path, *, job_id: str | None = None,
                  overrides: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None,
                  gcloud_flags: Mapping[str, str] | None = None) -> JobSpec:
        """Reads a YAML or JSON job config (YAML is a superset of JSON)."""
        from tf_config._yaml import YAMLInputError, safe_load
        from tf_config.limits import read_text

        path = Path(path)
        try:
            text = read_text(path)
        except OSError as exc:
            raise JobSpecError([Problem("error", "path", f"cannot read {str(path)!r}: "
                                        f"{exc.strerror}. Check the path.")]) from None
        except ValueError as exc:  # too large, or not UTF-8
            raise JobSpecError([Problem("error", "path", f"cannot read {str(path)!r}: {exc}. A job config "
                                        "is UTF-8 YAML or JSON of a few KiB.")]) from None
        try:
            doc = safe_load(text)
        except YAMLInputError as exc:
            raise JobSpecError([Problem("error", "path", f"{str(path)!r} is not valid YAML or JSON: "
                                        f"{exc} Fix it at the line shown.")]) from None
        return cls.from_dict({} if doc is None else doc, job_id=job_id, overrides=overrides, labels=labels,
                             gcloud_flags=gcloud_flags)

    @property
    def required_job_id(self) -> str:
        """``job_id`` where one is needed: backends only see specs that have one (``submit`` checks)."""
        if not self.job_id:
            raise JobSpecError([Problem("error", "job", "is missing; expected a job name.")])
        return self.job_id

    def with_job_id(self, job_id: str) -> JobSpec:
        return replace(self, job_id=job_id)

    def to_dict(self) -> dict[str, Any]:
        """A CMLE job document (``jobId``, ``labels``, ``trainingInput``)."""
        doc: dict[str, Any] = {"trainingInput": self.training_input.to_dict()}
        if self.job_id:
            doc["jobId"] = self.job_id
        if self.labels:
            doc["labels"] = dict(self.labels)
        if self.gcloud_flags:
            doc["gcloudFlags"] = dict(self.gcloud_flags)
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def _resolve_job_id(reader: FieldReader, explicit: str | None, from_file: object) -> str | None:
    if from_file is not None and not isinstance(from_file, str):
        reader.error("jobId", from_file, "a job name", "Write jobId as text or remove it.")
        from_file = None
    if explicit is not None and from_file is not None and explicit != from_file:
        reader.warn("jobId", f"the config file says {from_file!r} but the command line says "
                             f"{explicit!r}; using {explicit!r}.")
    name = explicit if explicit is not None else from_file
    if name is None:
        return None
    try:
        return validate_job_name(name, field="jobId" if explicit is None else "job")
    except JobSpecError as exc:
        reader.problems.extend(exc.problems)
        return None


#: why each of gcloud's own flags does nothing here (the rest: they configure gcloud itself)
_GCLOUD_ONLY = {"--staging-bucket": "gcloud uploads the package there; the tasks run the local package",
                "--tpu-tf-version": "there are no TPUs"}


def _read_gcloud_flags(reader: FieldReader, flags: Mapping[str, Any]) -> dict[str, str]:
    """gcloud's own flags as given, each with the warning that it has no effect."""
    good: dict[str, str] = {}
    for flag, value in flags.items():
        if not flag.startswith("--") or not isinstance(value, str):
            reader.error(f"gcloudFlags.{flag}", value, "a gcloud flag such as '--staging-bucket' and its value as "
                         "text", "Write it as `--flag: value`.")
            continue
        why = _GCLOUD_ONLY.get(flag, "it configures gcloud itself")
        reader.warn(flag, f"is recorded with the job ({value}); it has no effect on this backend: {why}.")
        good[flag] = value
    return good


def _read_labels(reader: FieldReader, value: object) -> dict[str, str]:
    """Labels travel to Kubernetes metadata, so they follow its (and CMLE's) label rules."""
    labels = reader.mapping(value, "labels")
    good: dict[str, str] = {}
    for key, val in labels.items():
        if not _LABEL.fullmatch(key):
            reader.error(f"labels.{key}", key, "a key of lowercase letters, digits, '-' and '_', "
                         "starting with a letter, at most 63 characters", "Rename the label.")
        elif not isinstance(val, str) or not _LABEL_VALUE.fullmatch(val):
            reader.error(f"labels.{key}", val, "a value of at most 63 lowercase letters, digits, "
                         "'-' and '_', starting and ending with a letter or digit",
                         "Quote the value and use only those characters.")
        else:
            good[key] = val
    return good
