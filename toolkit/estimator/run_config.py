"""``RunConfig``: Estimator's view of TF_CONFIG, plus where and how often to save.

``tf.estimator.RunConfig`` derived task type, id, chief-ness and replica
counts from TF_CONFIG and rejected layouts Estimator could not run. This one
keeps those semantics but delegates parsing and the general rules to
``tf_config`` (so an invalid TF_CONFIG fails with the validator's
``TFConfigError`` listing every problem) and adds Estimator's own rule: a
cluster must name its chief (``chief``, or CMLE/TF1's ``master``).

Pure Python: building a ``RunConfig`` never imports TensorFlow.

Example:
    >>> config = RunConfig(model_dir="runs/digits", tf_config={})
    >>> config.task_type, config.is_chief, config.num_worker_replicas
    ('worker', True, 1)
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from tf_config import Problem, TFConfig, TFConfigError

__all__ = ["RunConfig", "RunConfigError", "TRAIN_DISTRIBUTE_NAMES"]

TRAIN_DISTRIBUTE_NAMES = ("auto", "parameter_server", "multi_worker_mirrored", "mirrored", "one_device", "default")


class RunConfigError(ValueError):
    """A RunConfig argument (not TF_CONFIG) is invalid; ``.field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def _positive(field: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive int or None" if optional else "a positive int"
        raise RunConfigError(field, f"RunConfig `{field}` is {value!r}; expected {allowed}. Pass e.g. {field}=100.")


def _as_tf_config(value: Any) -> TFConfig:
    if value is None:
        return TFConfig.from_env()
    if isinstance(value, TFConfig):
        return value
    if isinstance(value, (str, bytes)):
        return TFConfig.from_json(value)
    if isinstance(value, Mapping):
        return TFConfig.from_dict(value)
    raise RunConfigError(
        "tf_config",
        f"RunConfig `tf_config` is {type(value).__name__} {value!r}; expected a TFConfig, JSON text, a "
        "dict, or None to read TF_CONFIG.",
    )


def _estimator_rules(cfg: TFConfig) -> None:
    """Estimator's rule beyond the validator's: a cluster names its chief."""
    if cfg.is_local or cfg.is_evaluator or "chief" in cfg.cluster or "master" in cfg.cluster:
        return
    jobs = ", ".join(cfg.cluster)
    raise TFConfigError([Problem(
        "error", "cluster.chief",
        f"TF_CONFIG `cluster` has no `chief` (jobs: {jobs}); Estimator-style training needs exactly one "
        'chief, which coordinates and writes checkpoints. Add e.g. "chief": ["host:port"] (or move '
        "worker 0 there).",
    )])


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Where to write and how often, and this task's place in the cluster.

    Attributes:
        model_dir: checkpoints, summaries, exports; every task must see the
            same directory (None: a temporary one, local runs only).
        save_checkpoints_steps: checkpoint every this many global steps.
        save_summary_steps: TensorBoard scalars every this many steps.
        keep_checkpoint_max: checkpoints kept on disk.
        log_step_count_steps: progress log lines every this many steps.
        train_distribute: strategy name for ``strategies.make_strategy``:
            ``auto`` (from TF_CONFIG), or one of ``TRAIN_DISTRIBUTE_NAMES``.
        sync_replicas: parameter-server training waits for
            ``replicas_to_aggregate`` gradient contributions per update
            (TF1's SyncReplicasOptimizer); False is asynchronous.
        replicas_to_aggregate: None means one per worker.
        tf_config: a ``TFConfig``, JSON text or dict; None reads TF_CONFIG.
        random_seed: passed to ``keras.utils.set_random_seed`` before building.
        chief_start_timeout, chief_lost_after: seconds a ps/worker server
            waits for a chief that never came up / that went silent (None:
            ``strategies.ServeOptions``' defaults, 900 and 6, or the launcher's).
    """

    model_dir: str | None = None
    save_checkpoints_steps: int = 100
    save_summary_steps: int = 100
    keep_checkpoint_max: int = 5
    log_step_count_steps: int = 100
    train_distribute: str = "auto"
    sync_replicas: bool = False
    replicas_to_aggregate: int | None = None
    tf_config: Any = None
    random_seed: int | None = None
    chief_start_timeout: float | None = None
    chief_lost_after: float | None = None

    def __post_init__(self) -> None:
        if self.model_dir is not None:
            if not isinstance(self.model_dir, (str, os.PathLike)) or not os.fspath(self.model_dir):
                raise RunConfigError("model_dir", f"RunConfig `model_dir` is {self.model_dir!r}; expected a "
                                     "non-empty path such as 'runs/digits'.")
            object.__setattr__(self, "model_dir", os.fspath(self.model_dir))
        for name in ("save_checkpoints_steps", "save_summary_steps", "keep_checkpoint_max", "log_step_count_steps"):
            _positive(name, getattr(self, name))
        _positive("replicas_to_aggregate", self.replicas_to_aggregate, optional=True)
        for name in ("chief_start_timeout", "chief_lost_after"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise RunConfigError(name, f"RunConfig `{name}` is {value!r}; expected a positive number of seconds "
                                     f"or None, e.g. {name}=60.")
        if self.train_distribute not in TRAIN_DISTRIBUTE_NAMES:
            raise RunConfigError(
                "train_distribute",
                f"RunConfig `train_distribute` is {self.train_distribute!r}; expected one of "
                f"{', '.join(TRAIN_DISTRIBUTE_NAMES)}. Use 'auto' to follow TF_CONFIG.",
            )
        if not isinstance(self.sync_replicas, bool):
            raise RunConfigError("sync_replicas", f"RunConfig `sync_replicas` is {self.sync_replicas!r}; "
                                 "expected True or False.")
        cfg = _as_tf_config(self.tf_config)
        _estimator_rules(cfg)
        if self.train_distribute != "auto":
            cfg.check(strategy=self.train_distribute)
        if self.sync_replicas and cfg.num_ps == 0 and not cfg.is_local:
            raise RunConfigError(
                "sync_replicas",
                "RunConfig `sync_replicas` is True but the cluster has no ps; synchronous replicas "
                "aggregate gradients on parameter servers. Add a ps job, or drop sync_replicas "
                "(multi_worker_mirrored is already synchronous).",
            )
        object.__setattr__(self, "tf_config", cfg)

    # ---- Estimator's derived facts ---------------------------------------------
    @property
    def task_type(self) -> str:
        return self.tf_config.task_type

    @property
    def task_id(self) -> int:
        return self.tf_config.task_index

    @property
    def is_chief(self) -> bool:
        return self.tf_config.is_chief and not self.tf_config.is_evaluator

    @property
    def num_ps_replicas(self) -> int:
        return 0 if self.tf_config.is_evaluator else self.tf_config.num_ps

    @property
    def num_worker_replicas(self) -> int:
        """Workers plus the chief; 1 locally; 0 for the evaluator (outside the cluster)."""
        return 0 if self.tf_config.is_evaluator else self.tf_config.num_workers

    @property
    def global_id_in_cluster(self) -> int | None:
        return self.tf_config.global_id

    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """The cluster as ``{job: [addresses]}`` (``tf.train.ClusterSpec(config.cluster_spec)`` if needed)."""
        return {job: list(addresses) for job, addresses in self.tf_config.cluster.items()}

    @property
    def is_evaluator(self) -> bool:
        return self.tf_config.is_evaluator

    @property
    def is_local(self) -> bool:
        return self.tf_config.is_local

    @property
    def aggregate(self) -> int:
        """Contributions per synchronous update: ``replicas_to_aggregate`` or the number of workers."""
        return self.replicas_to_aggregate or max(1, len(self.tf_config.cluster.get("worker", ())))

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (validated again), like Estimator's ``RunConfig.replace``."""
        return dataclasses.replace(self, **changes)
