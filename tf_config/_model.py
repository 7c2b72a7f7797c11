"""The TF_CONFIG as a frozen, self-validating dataclass.

Constructing a ``TFConfig`` (directly, through a ``from_*`` builder, or via
``dataclasses.replace``) always validates it, so holding one means holding a
usable cluster description. Warnings are logged by the ``from_*`` builders.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._errors import Problem, TFConfigError, errors_of
from ._rules_strategy import auto_strategy
from ._rules_task import index_value, single_task
from ._validate import TOP_LEVEL_KEYS, validate

logger = logging.getLogger(__name__)

_CHIEF_JOBS = ("chief", "master")
_EXTRA_KEYS = tuple(key for key in TOP_LEVEL_KEYS if key not in ("cluster", "task"))  # kept for round-trips


@dataclass(frozen=True)
class Task:
    """This process's place in the cluster.

    Attributes:
        type: chief, worker, ps, evaluator or master.
        index: position in ``cluster[type]``.
        trial: CMLE's hyperparameter-tuning trial id, kept for round-trips.
        cloud: CMLE's project tag, kept for round-trips.
    """

    type: str
    index: int
    trial: str | None = None
    cloud: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "index": self.index}
        out.update({k: v for k, v in (("trial", self.trial), ("cloud", self.cloud)) if v is not None})
        return out

    def __str__(self) -> str:
        return f"{self.type}-{self.index}"


@dataclass(frozen=True)
class TFConfig:
    """A validated TF_CONFIG.

    ``cluster`` is stored read-only (job -> tuple of addresses). The CMLE
    extras (``environment``, ``job``, ``session_master``, ``task.trial``),
    RunConfig's ``model_dir`` and ``eval_session_master``, and ``service`` are
    kept so that ``to_json`` gives back what was read. A task index TensorFlow
    casts (``"1"``) is stored as the int it means.

    Example:
        >>> cfg = TFConfig.from_json('{"cluster": {"chief": ["127.0.0.1:2222"], '
        ...     '"worker": ["127.0.0.1:2223"]}, "task": {"type": "worker", "index": 0}}')
        >>> cfg.is_chief, cfg.num_workers, cfg.global_id
        (False, 2, 1)
    """

    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    task: Task | None = None
    rpc_layer: str | None = None
    environment: str | None = None
    job: dict | None = None
    session_master: str | None = None
    service: dict | None = None
    eval_session_master: str | None = None
    model_dir: str | None = None

    def __post_init__(self) -> None:
        cluster = self.cluster
        if isinstance(cluster, Mapping):
            cluster = MappingProxyType({
                k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in cluster.items()
            })
        object.__setattr__(self, "cluster", cluster)
        for name in ("job", "service"):
            if isinstance(getattr(self, name), Mapping):
                object.__setattr__(self, name, copy.deepcopy(dict(getattr(self, name))))
        errors = errors_of(validate(self._raw_dict()))
        if errors:
            raise TFConfigError(errors)
        if isinstance(self.task, Mapping):  # a task given as a dict: now known to be valid
            object.__setattr__(self, "task", _task(self.task))
        elif isinstance(self.task, Task) and not isinstance(self.task.index, int):
            object.__setattr__(self, "task", dataclasses.replace(self.task, index=index_value(self.task.index)))

    def __hash__(self) -> int:
        return hash(self.to_json())

    # ---- builders -----------------------------------------------------------------
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TFConfig:
        """Read ``TF_CONFIG`` from the environment (the only place that does).

        Unset or blank means a one-process run: no cluster, no task.
        """
        text = cls.env_text(environ)
        return cls() if text is None else cls.from_json(text)

    @staticmethod
    def env_text(environ: Mapping[str, str] | None = None) -> str | None:
        """The raw ``TF_CONFIG`` text, or None when unset or blank.

        The one function that reads the variable; ``from_env`` builds on it, and
        tools that must report problems instead of raising (``tfdist tf-config
        validate``) pass the text to ``validate``.
        """
        env = os.environ if environ is None else environ
        text = env.get("TF_CONFIG", "")
        return text if text.strip() else None

    @classmethod
    def from_json(cls, text: str | bytes) -> TFConfig:
        """Parse and validate JSON text; raises ``TFConfigError`` listing every error."""
        problems = validate(text)
        _raise_or_log(problems)
        return cls._from_valid_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TFConfig:
        """Validate a decoded TF_CONFIG; raises ``TFConfigError`` listing every error."""
        _raise_or_log(validate(data))
        return cls._from_valid_dict(data)

    @classmethod
    def _for_tasks(cls, cluster: Mapping[str, list[str]], tasks: list[Task],
                   extras: Mapping[str, Any]) -> list[TFConfig]:
        """One config per task of ``cluster``, validating the cluster once instead of once per task.

        Every task's TF_CONFIG repeats the whole cluster, so validating each on its
        own is quadratic. A task's own rules depend only on its type and index; the
        first and last task of each job stand for the rest.
        """
        ends: dict[str, list[Task]] = {}
        for task in tasks:
            ends.setdefault(task.type, [task, task])[1] = task
        for first, last in ends.values():
            for task in {first.index: first, last.index: last}.values():
                _raise_or_log(validate({"cluster": cluster, "task": task.to_dict(), **extras}))
        frozen = MappingProxyType({k: tuple(v) for k, v in cluster.items()})
        if not all(0 <= t.index < len(frozen.get(t.type, (t,))) for t in tasks):  # the ends were checked
            raise ValueError("_for_tasks: a task's index is outside its job's addresses")
        configs = []
        for task in tasks:
            cfg = object.__new__(cls)
            values = {f.name: f.default if f.default is not dataclasses.MISSING else None
                      for f in dataclasses.fields(cls)}
            values.update({k: copy.deepcopy(v) for k, v in extras.items()}, cluster=frozen, task=task)
            for name, value in values.items():
                object.__setattr__(cfg, name, value)
            configs.append(cfg)
        return configs

    @classmethod
    def _from_valid_dict(cls, data: Mapping[str, Any]) -> TFConfig:
        task = data.get("task")
        return cls(
            cluster=dict(data.get("cluster") or {}),
            task=None if task is None else _task(task),
            **{k: data.get(k) for k in _EXTRA_KEYS},
        )

    # ---- writers ------------------------------------------------------------------
    def _raw_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["cluster"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.cluster.items()}
        if self.task is not None:
            out["task"] = self.task.to_dict() if isinstance(self.task, Task) else self.task
        for name in _EXTRA_KEYS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-ready dict (a deep copy: mutating it cannot touch the config)."""
        return copy.deepcopy(self._raw_dict())

    def to_json(self, indent: int | None = None) -> str:
        """The TF_CONFIG text to put in the environment."""
        return json.dumps(self._raw_dict(), indent=indent)

    def with_task(self, type: str, index: int) -> TFConfig:  # `type` mirrors TF_CONFIG's key
        """The same cluster seen from another task (validated again)."""
        return dataclasses.replace(self, task=Task(type=type, index=index))

    def check(self, strategy: str | None = None, *, strict: bool = False) -> TFConfig:
        """Re-validate with the rules of ``strategy``; returns self for chaining.

        Raises:
            TFConfigError: the cluster cannot run ``strategy`` (or the name is
                unknown); with ``strict``, also a risky form TensorFlow accepts.
        """
        problems = validate(self._raw_dict(), strategy=strategy, strict=strict)
        if errors_of(problems):
            raise TFConfigError(problems)
        return self

    # ---- derived facts ------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """No cluster: a one-process run."""
        return not self.cluster

    @property
    def task_type(self) -> str:
        """``task.type``; without a task, the only task of a one-task cluster, else ``worker``."""
        if self.task is not None:
            return self.task.type
        implied = single_task(dict(self.cluster))
        return implied[0] if implied else "worker"

    @property
    def task_index(self) -> int:
        return self.task.index if self.task is not None else 0

    @property
    def chief_job(self) -> str | None:
        """The job holding the chief: chief, master, or worker (its task 0) when neither exists."""
        for job in (*_CHIEF_JOBS, "worker"):
            if job in self.cluster:
                return job
        return None

    @property
    def chief_address(self) -> str | None:
        job = self.chief_job
        return self.cluster[job][0] if job is not None else None

    @property
    def is_chief(self) -> bool:
        if self.is_local:
            return self.task_type == "worker" and self.task_index == 0
        job = self.chief_job
        return self.task_type == job and (job != "worker" or self.task_index == 0)

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == "evaluator"

    @property
    def is_ps(self) -> bool:
        return self.task_type == "ps"

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get("ps", ()))

    @property
    def num_workers(self) -> int:
        """Training workers, chief/master included; 1 for a one-process run."""
        if self.is_local:
            return 1
        return sum(len(self.cluster.get(job, ())) for job in ("chief", "master", "worker"))

    @property
    def address(self) -> str | None:
        """This task's ``host:port``; None when local or for an evaluator not listed in the cluster."""
        addresses = self.cluster.get(self.task_type, ())
        return addresses[self.task_index] if self.task_index < len(addresses) else None

    @property
    def global_id(self) -> int | None:
        """Estimator's global id: chief 0, other non-ps jobs alphabetically, ps last.

        As TensorFlow computes it (``RunConfig.global_id_in_cluster``): an
        evaluator listed in the cluster takes its place in the alphabetical
        order, but the evaluator's own id is None (it is not part of training).
        """
        if self.is_evaluator:
            return None
        if self.is_local:
            return 0
        chief = self.chief_job or "chief"
        order = [chief] + sorted(j for j in self.cluster if j not in (chief, "ps"))
        order.append("ps")
        offset = 0
        for job in order:
            if job == self.task_type:
                return offset + self.task_index
            offset += len(self.cluster.get(job, ()))
        return None


def _task(task: Mapping[str, Any]) -> Task:
    """A validated task mapping as a Task, its index as the int TensorFlow reads."""
    index = index_value(task["index"])
    assert index is not None, "validated before"
    return Task(type=task["type"], index=index, trial=task.get("trial"), cloud=task.get("cloud"))


def _raise_or_log(problems: list[Problem]) -> None:
    if errors_of(problems):
        raise TFConfigError(problems)
    for problem in problems:
        logger.warning("%s", problem)


def recommend_strategy(cfg: TFConfig, *, num_local_gpus: int = 0) -> tuple[str, str]:
    """The strategy ``auto`` picks, and why.

    ps tasks -> parameter_server; several workers and no ps -> multi_worker_mirrored;
    more than one local GPU -> mirrored; otherwise default.

    Example:
        >>> recommend_strategy(TFConfig())
        ('default', 'there is no cluster and this machine has no GPU, so nothing needs distributing')
    """
    return auto_strategy(dict(cfg.cluster), num_local_gpus=num_local_gpus)
