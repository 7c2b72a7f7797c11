"""``RunConfig``: ``tf.estimator.RunConfig``'s surface and semantics, read from TF_CONFIG.

TF_CONFIG is parsed and validated by ``tf_config`` (an invalid one fails with
the validator's ``TFConfigError`` listing every problem); this module adds
Estimator's derivations (``master``, ``cluster_spec``, ``num_worker_replicas``, ...)
under TF's attribute names, each documented where it is defined.

Pure Python: building a ``RunConfig`` never imports TensorFlow.

Example:
    >>> config = RunConfig(model_dir="runs/digits", tf_config={})
    >>> config.task_type, config.is_chief, config.num_worker_replicas, config.master
    ('worker', True, 1, '')
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from tf_config import Problem, TFConfig, TFConfigError
from tf_config.checks import check_number
from toolkit.estimator._run_config_checks import (
    REPLACEABLE,
    USE_DEFAULT,
    RunConfigError,
    RunConfigTFConfigError,
    RunConfigTypeError,
    check_fields,
    check_service,
    default_session_config,
    resolve_checkpoint_every,
    tf_phrase,
)
from toolkit.estimator._strategy_kinds import strategy_kind

__all__ = ["ClusterSpecDict", "RunConfig", "RunConfigError", "RunConfigTypeError"]

logger = logging.getLogger(__name__)


class ClusterSpecDict(dict):
    """``{job: [addresses]}`` that also answers ``tf.train.ClusterSpec``'s questions.

    It can be passed wherever TF accepts a cluster dict (``replica_device_setter``,
    ``tf.train.ClusterSpec(...)``), and, like an empty ``ClusterSpec``, is falsy
    when there is no cluster.
    """

    @property
    def jobs(self) -> list[str]:
        return list(self)

    def as_dict(self) -> dict[str, list[str]]:
        return {job: list(addresses) for job, addresses in self.items()}

    def num_tasks(self, job_name: str) -> int:
        return len(self[job_name])

    def job_tasks(self, job_name: str) -> list[str]:
        return list(self[job_name])


def _decoded(value: Any) -> Any:
    """The TF_CONFIG as a dict before validation (None when it is not JSON), for TF's own checks."""
    try:
        if value is None:
            text = TFConfig.env_text()
            return json.loads(text) if text else {}
        if isinstance(value, (str, bytes)):
            return json.loads(value)
    except ValueError:
        return None
    return dict(value) if isinstance(value, Mapping) else None


def _as_tf_config(value: Any, *, chief_required: bool = True) -> tuple[TFConfig, dict[str, Any], int | None]:
    """The validated TFConfig, the raw dict and an evaluator's index above 0 (else None); an invalid TF_CONFIG
    also gets the phrase tf.estimator raised."""
    decoded = _decoded(value)
    check_service(decoded)
    evaluator_index = _evaluator_index(decoded)
    if evaluator_index is not None:  # TF's RunConfig kept it; train_and_evaluate refuses it (see training.py)
        logger.warning("TF_CONFIG `task.index` is %d for the evaluator; there is only one evaluator, so "
                       "train_and_evaluate will refuse this task. Set \"index\": 0.", evaluator_index)
        value = {**decoded, "task": {**decoded["task"], "index": 0}}
    try:
        cfg = _validated(value)
        _estimator_rules(cfg, chief_required=chief_required)
    except TFConfigError as error:
        phrase = tf_phrase(decoded) if chief_required else None
        if phrase is None:
            raise
        raise RunConfigTFConfigError(error.problems, phrase) from None
    return cfg, (cfg.to_dict() if isinstance(value, TFConfig) else decoded), evaluator_index


def _evaluator_index(decoded: Any) -> int | None:
    task = decoded.get("task") if isinstance(decoded, dict) else None
    if not isinstance(task, dict) or task.get("type") != "evaluator":
        return None
    index = task.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) and index > 0 else None


def _validated(value: Any) -> TFConfig:
    if value is None:
        return TFConfig.from_env()
    if isinstance(value, TFConfig):
        return value
    if isinstance(value, (str, bytes)):
        return TFConfig.from_json(value)
    if isinstance(value, Mapping):
        return TFConfig.from_dict(value)
    raise RunConfigError(
        f"RunConfig `tf_config` is {type(value).__name__} {value!r}; expected a TFConfig, JSON text, a "
        "dict, or None to read TF_CONFIG.", field="tf_config"
    )


def _estimator_rules(cfg: TFConfig, *, chief_required: bool) -> None:
    """Estimator's rules beyond the validator's: a cluster names this task and its chief.

    With ``train_distribute`` set TF's RunConfig skipped the chief rule (its distribute coordinator
    made worker 0 the chief of a workers-only cluster), and so does this one.
    """
    if not cfg.is_local and cfg.task is None:   # the validator warns only (TF 2's resolvers accept it)
        raise TFConfigError([Problem(
            "error", "task",
            f"TF_CONFIG has a `cluster` ({', '.join(cfg.cluster)}) but no `task`; Estimator-style training must "
            'know which task this process is. Add e.g. "task": {"type": "chief", "index": 0}.',
        )])
    if cfg.is_local or cfg.is_evaluator or "chief" in cfg.cluster or "master" in cfg.cluster or not chief_required:
        return
    jobs = ", ".join(cfg.cluster)
    raise TFConfigError([Problem(
        "error", "cluster.chief",
        f"TF_CONFIG `cluster` has no `chief` (jobs: {jobs}); Estimator-style training needs exactly one "
        'chief, which coordinates and writes checkpoints. Add e.g. "chief": ["host:port"] (or move '
        "worker 0 there).",
    )])


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) and value else None


def _read_only(obj: Any, name: str) -> bool:
    """A property without a setter on the object's class (a subclass may make a field one, as TF allowed)."""
    attribute = getattr(type(obj), name, None)
    return isinstance(attribute, property) and attribute.fset is None


@dataclasses.dataclass
class RunConfig:
    """Where to write and how often, and this task's place in the cluster (TF's ``RunConfig``).

    Attributes:
        model_dir: checkpoints, summaries, exports; every task must see the
            same directory. None: TF_CONFIG's ``model_dir``, else a temporary
            directory (one-process runs only).
        tf_random_seed: graph-level seed set in every graph the Estimator builds.
        save_summary_steps: summaries every this many global steps.
        save_checkpoints_steps / save_checkpoints_secs: at most one of them;
            neither means every 600 s (TF's default: ``save_checkpoints_secs``
            reads 600); both None explicitly, no checkpoints.
        session_config: a ``tf.compat.v1.ConfigProto``; None: in a cluster,
            TF's between-graph default (soft placement, device filters to the
            ps and this task), which ``session_config`` then reads.
        keep_checkpoint_max: checkpoints kept on disk.
        keep_checkpoint_every_n_hours: as ``tf.compat.v1.train.Saver``.
        log_step_count_steps: loss and steps/s are logged every this many steps.
        train_distribute: a ``tf.distribute`` strategy to train under, as TF 2's
            Estimator did (``toolkit.estimator._strategy_kinds`` lists which); None:
            between-graph from TF_CONFIG (replica_device_setter and ps tasks), as in TF1.
        eval_distribute: a one-machine strategy for ``evaluate``.
        device_fn: overrides the ``replica_device_setter`` placement.
        session_creation_timeout_secs: how long a worker waits for the chief's init.
        chief_start_timeout, chief_lost_after: seconds a ps server waits for a
            chief that never came up / that went silent before it exits (None:
            ``strategies.ServeOptions``' defaults, 900 and 6, or the launcher's).
        tf_config: a ``TFConfig``, JSON text or dict; None reads TF_CONFIG.

    Like TF's, the fields read as attributes but are not assigned (``replace``
    makes a changed copy); other attributes may be set freely.
    """

    model_dir: str | None = None
    tf_random_seed: int | None = None
    save_summary_steps: int = 100
    save_checkpoints_steps: Any = USE_DEFAULT
    save_checkpoints_secs: Any = USE_DEFAULT
    session_config: Any = None
    keep_checkpoint_max: int = 5
    keep_checkpoint_every_n_hours: float = 10000
    log_step_count_steps: int = 100
    train_distribute: Any = None
    device_fn: Any = None
    protocol: str | None = None
    eval_distribute: Any = None
    experimental_distribute: Any = None
    experimental_max_worker_delay_secs: int | None = None
    session_creation_timeout_secs: int = 7200
    checkpoint_save_graph_def: bool = True
    chief_start_timeout: float | None = None
    chief_lost_after: float | None = None
    tf_config: Any = None

    def __setattr__(self, name: str, value: Any) -> None:
        if _read_only(self, name):
            if not self.__dict__.get("_initialised"):
                return  # a subclass property answers for this field (TF's FakeConfig pattern)
            raise AttributeError(f"RunConfig `{name}` is read-only; use config.replace({name}=...) for a copy.")
        if self.__dict__.get("_initialised") and name in self.__dataclass_fields__:
            raise AttributeError(f"RunConfig `{name}` is read-only, as in TF; use config.replace({name}=...) for a "
                                 "changed copy.")
        object.__setattr__(self, name, value)

    def _set(self, name: str, value: Any) -> None:
        if not _read_only(self, name):
            object.__setattr__(self, name, value)

    def __post_init__(self) -> None:
        cfg, raw, evaluator_index = _as_tf_config(self.tf_config, chief_required=self.train_distribute is None)
        self._set("tf_config", cfg)
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "_evaluator_index", evaluator_index)
        self._check_model_dir(_text(raw, "model_dir"))
        steps, secs = resolve_checkpoint_every(self.save_checkpoints_steps, self.save_checkpoints_secs)
        self._set("save_checkpoints_steps", steps)
        self._set("save_checkpoints_secs", secs)
        check_fields(self)
        derived = (self.session_config is None and not self.is_local and not self.is_evaluator
                   and self.train_distribute is None)  # a strategy's session config is the strategy's
        object.__setattr__(self, "_session_config_derived", derived)
        if derived:
            self._set("session_config", default_session_config(self.task_type, self.task_id))
        kinds = {name: strategy_kind(getattr(self, name), name, has_cluster=not (self.is_local or self.is_evaluator),
                                     has_ps=self.num_ps_replicas > 0)
                 for name in ("train_distribute", "eval_distribute") if getattr(self, name) is not None}
        object.__setattr__(self, "_strategy_kinds", kinds)
        for name in ("chief_start_timeout", "chief_lost_after"):
            check_number(getattr(self, name), field=name, optional=True, error=RunConfigError, owner="RunConfig",
                         unit="seconds", example=60)
        object.__setattr__(self, "_initialised", True)

    def _check_model_dir(self, from_tf_config: str | None) -> None:
        model_dir = self.model_dir
        if model_dir is not None:
            if not isinstance(model_dir, (str, os.PathLike)) or not os.fspath(model_dir):
                raise RunConfigError(f"RunConfig `model_dir` is {model_dir!r}; model_dir should be non-empty: "
                                     "expected a path such as 'runs/digits'.", field="model_dir")
            model_dir = os.fspath(model_dir)
        if from_tf_config is not None:
            if model_dir is not None and model_dir != from_tf_config:
                raise RunConfigError(f"RunConfig `model_dir` is {model_dir!r} but TF_CONFIG's "
                                     f"`model_dir` is {from_tf_config!r}; pass the same path, or only one. "
                                     "(`model_dir` provided in RunConfig construct, if set, must have the same "
                                     "value as the model_dir in TF_CONFIG. )", field="model_dir")
            model_dir = from_tf_config
        self._set("model_dir", model_dir)

    # ---- the task's place in the cluster (TF's names) --------------------------------
    @property
    def task_type(self) -> str:
        return self.tf_config.task_type

    @property
    def task_id(self) -> int:
        return self.__dict__.get("_evaluator_index") or self.tf_config.task_index

    @property
    def is_chief(self) -> bool:
        return self.tf_config.is_chief and not self.tf_config.is_evaluator

    @property
    def is_evaluator(self) -> bool:
        return self.tf_config.is_evaluator

    @property
    def is_local(self) -> bool:
        return self.tf_config.is_local

    @property
    def num_ps_replicas(self) -> int:
        return 0 if self.is_evaluator else self.tf_config.num_ps

    @property
    def num_worker_replicas(self) -> int:
        """Workers plus the chief; 1 locally; 0 for the evaluator (outside the cluster)."""
        return 0 if self.is_evaluator else self.tf_config.num_workers

    @property
    def global_id_in_cluster(self) -> int | None:
        """Chief 0, then the other non-ps jobs alphabetically, ps last (TF's numbering)."""
        return self.tf_config.global_id

    @property
    def cluster_spec(self) -> ClusterSpecDict:
        """TF_CONFIG's cluster, as TF's RunConfig gives it (an evaluator listed there included); empty locally
        and on the evaluator (TF's evaluator sees no cluster)."""
        if self.is_evaluator or self.is_local:
            return ClusterSpecDict()
        return ClusterSpecDict({job: list(addresses) for job, addresses in self.tf_config.cluster.items()
                                if addresses})

    @property
    def master(self) -> str:
        """``grpc://host:port`` of this task, TF_CONFIG's ``session_master`` if set.

        ``''`` (in-process) with no cluster, on the evaluator, and for a cluster of
        one task: TF runs a lone task directly rather than through its own RPC server.
        """
        if self.is_evaluator:
            return ""
        explicit = _text(self._raw, "session_master")  # type: ignore[attr-defined]
        if explicit is not None:
            return explicit
        if sum(len(addresses) for addresses in self.tf_config.cluster.values()) <= 1:
            return ""
        address = None if self.is_local else self.tf_config.address
        return f"{self.protocol or self.tf_config.rpc_layer or 'grpc'}://{address}" if address else ""

    @property
    def evaluation_master(self) -> str:
        """TF_CONFIG's ``eval_session_master`` on the evaluator or a one-process run; ``''`` (in-process)
        otherwise, as in TF."""
        if not self.is_evaluator and not self.is_local:
            return ""
        return _text(self._raw, "eval_session_master") or ""  # type: ignore[attr-defined]

    @property
    def worker_index(self) -> int:
        """This task's position among the training replicas (chief 0, then the workers); 0 elsewhere."""
        if self.task_type in ("chief", "master") or self.is_local or self.is_evaluator or self.tf_config.is_ps:
            return 0
        chiefs = sum(len(self.tf_config.cluster.get(job, ())) for job in ("chief", "master"))
        return chiefs + self.task_id

    @property
    def service(self) -> Any:
        """TF_CONFIG's ``service`` dict (e.g. a Cloud ML Engine service), or None."""
        return self._raw.get("service")  # type: ignore[attr-defined]

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (validated again), like TF's ``RunConfig.replace``.

        Only TF's replaceable arguments (and this toolkit's own) may change; setting one of
        ``save_checkpoints_steps`` / ``save_checkpoints_secs`` clears the other, as in TF.
        """
        unknown = sorted(set(changes) - REPLACEABLE)
        if unknown:
            raise RunConfigError(f"Replacing {', '.join(unknown)} is not supported: RunConfig.replace changes "
                                 f"only {', '.join(sorted(REPLACEABLE))}.", field=unknown[0])
        changes.setdefault("tf_config", self._raw or self.tf_config)  # type: ignore[attr-defined]
        if "session_config" not in changes and self._session_config_derived:  # type: ignore[attr-defined]
            changes["session_config"] = None  # derived again for the copy
        steps_given, secs_given = "save_checkpoints_steps" in changes, "save_checkpoints_secs" in changes
        if steps_given and not secs_given and changes["save_checkpoints_steps"] is not None:
            changes["save_checkpoints_secs"] = None
        elif secs_given and not steps_given and changes["save_checkpoints_secs"] is not None:
            changes["save_checkpoints_steps"] = None
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        copied = type(self)(**{**values, **changes})
        for key, value in self.__dict__.items():  # attributes the user set, as TF's copy kept them
            if not key.startswith("_") and key not in values:
                object.__setattr__(copied, key, value)
        return copied

    @property
    def checkpoint_every(self) -> dict[str, int | None]:
        """``{"save_checkpoints_steps": ..., "save_checkpoints_secs": ...}`` (both None: no checkpoints)."""
        return {"save_checkpoints_steps": self.save_checkpoints_steps,
                "save_checkpoints_secs": self.save_checkpoints_secs}
