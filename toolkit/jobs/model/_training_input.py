"""What a job runs and on how many tasks (CMLE's ``trainingInput``), as frozen data.

A leaf of ``toolkit.jobs``: the spec (``spec.py``) and the two config readers
(``_cmle.py``, ``_vertex.py``) all build on these, so it imports none of them.
"""
from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.jobs.errors import JobSpecError, Problem, show
from toolkit.jobs.model.hyperparams import HyperparameterSpec
from toolkit.jobs.model.tiers import SCALE_TIERS

__all__ = ["MODULE_PATTERN", "ROLE_FIELDS", "ReplicaConfig", "TrainingInput", "training_input_to_dict"]

# role -> (count field, machine type field, config field)
ROLE_FIELDS = {
    "master": (None, "masterType", "masterConfig"),
    "worker": ("workerCount", "workerType", "workerConfig"),
    "parameter_server": ("parameterServerCount", "parameterServerType", "parameterServerConfig"),
    "evaluator": ("evaluatorCount", "evaluatorType", "evaluatorConfig"),
}
MODULE_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class ReplicaConfig:
    """One kind of task: how many, and on what machine (machines matter to Kubernetes only)."""

    count: int
    machine_type: str | None = None
    image_uri: str | None = None
    accelerator_type: str | None = None
    accelerator_count: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 0:
            raise JobSpecError([Problem("error", "ReplicaConfig.count",
                                        f"received {show(self.count)}; expected an integer >= 0.")])


@dataclass(frozen=True)
class TrainingInput:
    """The backend-independent half of a CMLE ``trainingInput``.

    Attributes:
        python_module: run in every task as ``python -m <python_module> <args>``.
        use_chief_in_tf_config: TF_CONFIG names the primary task ``chief`` (TF2)
            instead of CMLE's default ``master``.
        recorded: fields tfdist accepts but does not act on (``serviceAccount``,
            ``network``, ...), kept so ``describe`` shows everything submitted.
    """

    python_module: str | None
    scale_tier: str = "BASIC"
    master: ReplicaConfig = ReplicaConfig(1)
    worker: ReplicaConfig = ReplicaConfig(0)
    parameter_server: ReplicaConfig = ReplicaConfig(0)
    evaluator: ReplicaConfig = ReplicaConfig(0)
    package_uris: tuple[str, ...] = ()
    package_path: str | None = None
    args: tuple[str, ...] = ()
    job_dir: str | None = None
    region: str | None = None
    runtime_version: str | None = None
    python_version: str | None = None
    use_chief_in_tf_config: bool = False
    hyperparameters: HyperparameterSpec | None = None
    max_running_seconds: int | None = None
    recorded: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}))

    def __post_init__(self) -> None:
        problems = []
        if self.scale_tier not in SCALE_TIERS:
            problems.append(Problem("error", "trainingInput.scaleTier",
                                    f"received {show(self.scale_tier)}; expected one of "
                                    f"{', '.join(SCALE_TIERS)}."))
        if self.master.count != 1:
            problems.append(Problem("error", "trainingInput.master",
                                    f"received count {self.master.count}; a job has exactly one master."))
        if self.evaluator.count > 1:
            problems.append(Problem("error", "trainingInput.evaluatorCount",
                                    f"received {self.evaluator.count}; TensorFlow allows at most one evaluator."))
        if self.python_module is not None and not MODULE_PATTERN.fullmatch(self.python_module):
            problems.append(Problem("error", "trainingInput.pythonModule",
                                    f"received {show(self.python_module)}; expected a dotted module "
                                    "name such as trainer.task."))
        if problems:
            raise JobSpecError(problems)
        object.__setattr__(self, "recorded", types.MappingProxyType(dict(self.recorded)))

    @property
    def primary_task_type(self) -> str:
        """``chief`` or ``master``: the TF_CONFIG name of the task that coordinates."""
        return "chief" if self.use_chief_in_tf_config else "master"

    @property
    def task_counts(self) -> dict[str, int]:
        """Tasks per TF_CONFIG job name, e.g. ``{'master': 1, 'worker': 2, 'ps': 1}``."""
        counts = {self.primary_task_type: 1, "worker": self.worker.count,
                  "ps": self.parameter_server.count, "evaluator": self.evaluator.count}
        return {k: v for k, v in counts.items() if v}

    @property
    def task_names(self) -> tuple[str, ...]:
        """Every task as ``<type>-<index>``: the names used in logs and status tables."""
        return tuple(f"{kind}-{i}" for kind, n in self.task_counts.items() for i in range(n))

    def replicas(self) -> dict[str, ReplicaConfig]:
        """Replica configs keyed by TF_CONFIG job name, tasks with count 0 left out."""
        every = {self.primary_task_type: self.master, "worker": self.worker,
                 "ps": self.parameter_server, "evaluator": self.evaluator}
        return {k: v for k, v in every.items() if v.count}

    def to_dict(self) -> dict[str, Any]:
        """The CMLE ``trainingInput`` document; ``JobSpec.from_dict`` reads it back."""
        return training_input_to_dict(self)


def training_input_to_dict(ti: TrainingInput) -> dict[str, Any]:
    """The CMLE ``trainingInput`` for ``ti``; ``read_training_input`` reads it back."""
    doc: dict[str, Any] = {"scaleTier": ti.scale_tier}
    for role, (count_key, type_key, config_key) in ROLE_FIELDS.items():
        replica: ReplicaConfig = getattr(ti, role)
        if ti.scale_tier == "CUSTOM" and replica.count:
            doc[type_key] = replica.machine_type
            if count_key:
                doc[count_key] = replica.count
        config: dict[str, Any] = {}
        if replica.image_uri:
            config["imageUri"] = replica.image_uri
        if replica.accelerator_count:
            config["acceleratorConfig"] = {"count": replica.accelerator_count, "type": replica.accelerator_type}
        if config:
            doc[config_key] = config
    optional = {"pythonModule": ti.python_module, "packagePath": ti.package_path, "jobDir": ti.job_dir,
                "region": ti.region, "runtimeVersion": ti.runtime_version, "pythonVersion": ti.python_version,
                "packageUris": list(ti.package_uris), "args": list(ti.args)}
    doc.update({k: v for k, v in optional.items() if v})
    if ti.use_chief_in_tf_config:
        doc["useChiefInTfConfig"] = True
    if ti.hyperparameters is not None:
        doc["hyperparameters"] = ti.hyperparameters.to_dict()
    if ti.max_running_seconds:
        doc["scheduling"] = {"maxRunningTime": f"{ti.max_running_seconds}s"}
    for key, value in ti.recorded.items():
        parent, dot, child = key.partition(".")
        if dot:  # a field of a nested object: scheduling.maxWaitTime, masterConfig.diskConfig
            doc.setdefault(parent, {})[child] = value
        else:
            doc[key] = value
    return doc
