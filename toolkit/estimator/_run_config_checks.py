"""``RunConfig``'s argument checks with tf.estimator's key phrases, its ``replace`` rules and TF's session config.

Each message names the argument and the value (house style) and carries the
phrase TF's RunConfig used ("save_summary_steps should be >= 0", ...), so code
that matched TF's messages still matches. Pure Python except
``default_session_config``, which builds a ``ConfigProto`` (only for a cluster).
"""
from __future__ import annotations

import inspect
from typing import Any

from tf_config import TFConfigError
from tf_config.errors import FieldError, Problem

__all__ = ["REPLACEABLE", "USE_DEFAULT", "RunConfigError", "RunConfigTFConfigError", "RunConfigTypeError",
           "check_fields", "check_service", "default_session_config", "resolve_checkpoint_every", "tf_phrase"]

#: what ``RunConfig.replace`` may change: TF's list, plus this toolkit's own arguments
REPLACEABLE = frozenset((
    "model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps", "save_checkpoints_secs",
    "session_config", "keep_checkpoint_max", "keep_checkpoint_every_n_hours", "log_step_count_steps",
    "train_distribute", "device_fn", "protocol", "eval_distribute", "experimental_distribute",
    "experimental_max_worker_delay_secs", "session_creation_timeout_secs", "checkpoint_save_graph_def",
    "chief_start_timeout", "chief_lost_after", "tf_config",
))


class _UseDefault:
    def __repr__(self) -> str:
        return "USE_DEFAULT"


USE_DEFAULT: Any = _UseDefault()
_DEFAULT_CHECKPOINT_SECS = 600


class RunConfigError(FieldError):
    """A RunConfig argument (not TF_CONFIG) is invalid; ``.field`` names it."""


class RunConfigTypeError(RunConfigError, TypeError):
    """A RunConfig argument of the wrong type (where ``tf.estimator`` raised ``TypeError``)."""


class RunConfigTFConfigError(TFConfigError):
    """An invalid TF_CONFIG given to ``RunConfig``: the validator's problems, then the phrase tf.estimator's
    RunConfig raised for the same TF_CONFIG (a ``ValueError``, as TF's), so code that matched TF's message still
    matches."""

    def __init__(self, problems: list[Problem], tf_message: str) -> None:
        self.tf_message = tf_message
        super().__init__(problems)

    def _summary(self, errors: list[Problem]) -> str:
        return f"{super()._summary(errors)}\n(tf.estimator's RunConfig: {self.tf_message})"


def _index(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _tf_task_phrase(jobs: dict[str, Any], task: dict[str, Any], chief: str) -> str | None:
    """TF's ``_validate_task_type_and_task_id``: its first complaint, in its words, or None."""
    if chief not in jobs:
        return f'If "cluster" is set in TF_CONFIG, it must have one "{chief}" node.'
    if isinstance(jobs[chief], (list, tuple, dict)) and len(jobs[chief]) > 1:
        return f'The "cluster" in TF_CONFIG must have only one "{chief}" node.'
    task_type, task_id = task.get("type"), task.get("index")
    if not task_type:
        return 'If "cluster" is set in TF_CONFIG, task type must be set.'
    if task_id is None:
        return 'If "cluster" is set in TF_CONFIG, task index must be set.'
    index = _index(task_id)
    if index is not None and index < 0:
        return "Task index must be non-negative number."
    if task_type == "evaluator":
        return None
    if task_type not in jobs:
        return f"{task_type} is not a valid task_type in the cluster_spec (jobs: {', '.join(map(str, jobs))})."
    addresses = jobs[task_type]
    if index is not None and isinstance(addresses, (list, tuple, dict)) and not 0 <= index < len(addresses):
        return f"{index} is not a valid task_id for task_type {task_type} in the cluster_spec."
    return None


def tf_phrase(raw: Any) -> str | None:
    """The message tf.estimator's RunConfig raised (a ``ValueError``) for this decoded TF_CONFIG, or None."""
    if not isinstance(raw, dict):
        return None
    task: dict[str, Any] = raw["task"] if isinstance(raw.get("task"), dict) else {}
    cluster = raw.get("cluster")
    jobs = {job: hosts for job, hosts in cluster.items() if hosts} if isinstance(cluster, dict) else {}
    if not jobs:
        if task.get("type", "worker") != "worker":
            return 'If "cluster" is not set in TF_CONFIG, task type must be WORKER.'
        if _index(task.get("index", 0)) != 0:
            return 'If "cluster" is not set in TF_CONFIG, task index must be 0.'
        model_dir = raw.get("model_dir")
        return "model_dir in TF_CONFIG should be non-empty" if model_dir == "" else None
    if "master" in jobs:
        if "chief" in jobs:
            return "If `master` node exists in `cluster`, job `chief` is not supported."
        phrase = _tf_task_phrase(jobs, task, "master")
        if phrase is None and task.get("type") == "evaluator":
            return "If `master` node exists in `cluster`, task_type `evaluator` is not supported."
        return phrase
    phrase = _tf_task_phrase(jobs, task, "chief")
    if phrase is None and raw.get("model_dir") == "":
        return "model_dir in TF_CONFIG should be non-empty"
    return phrase


def _error(message: str, field: str) -> Exception:
    return RunConfigError(message, field=field)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(config: Any, field: str, tf_phrase: str, minimum: int, example: str) -> None:
    value = getattr(config, field)
    if value is None:
        return
    if not _is_int(value) or value < minimum:
        raise _error(f"RunConfig `{field}` is {value!r}; {tf_phrase}: expected an integer >= {minimum}, e.g. "
                     f"{field}={example}, or None.", field)


def check_fields(config: Any) -> None:
    """TF's checks of every argument (None passes each, as in TF; model_dir is RunConfig's), with TF's phrases."""
    _count(config, "save_summary_steps", "save_summary_steps should be >= 0", 0, "100")
    _count(config, "save_checkpoints_steps", "save_checkpoints_steps should be >= 0 (and >= 1: a checkpoint "
           "every 0 steps is none)", 1, "1000")
    _count(config, "save_checkpoints_secs", "save_checkpoints_secs should be >= 0 (and >= 1: a checkpoint "
           "every 0 seconds is none)", 1, "600")
    _count(config, "keep_checkpoint_max", "keep_checkpoint_max should be >= 0", 0, "5")
    _count(config, "log_step_count_steps", "log_step_count_steps should be >= 0", 0, "100")
    _count(config, "session_creation_timeout_secs", "session_creation_timeout_secs should be > 0", 1, "7200")
    hours = config.keep_checkpoint_every_n_hours
    if hours is not None and (isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0):
        raise _error(f"RunConfig `keep_checkpoint_every_n_hours` is {hours!r}; keep_checkpoint_every_n_hours "
                     "should be > 0: expected a number of hours, e.g. 10000.", "keep_checkpoint_every_n_hours")
    seed = config.tf_random_seed
    if seed is not None and (not _is_int(seed) or seed < 0):
        raise _error(f"RunConfig `tf_random_seed` is {seed!r}; tf_random_seed must be integer (>= 0), e.g. "
                     "tf_random_seed=42.", "tf_random_seed")
    delay = config.experimental_max_worker_delay_secs
    if delay is not None and not _is_int(delay):
        raise _error(f"RunConfig `experimental_max_worker_delay_secs` is {delay!r}; "
                     "experimental_max_worker_delay_secs must be an integer if set.",
                     "experimental_max_worker_delay_secs")
    session_config = config.session_config
    if session_config is not None and type(session_config).__name__ != "ConfigProto":
        raise _error(f"RunConfig `session_config` is {type(session_config).__name__} {session_config!r:.60}; "
                     "session_config must be instance of ConfigProto: pass tf.compat.v1.ConfigProto(...) or None.",
                     "session_config")
    _check_device_fn(config.device_fn)


def _check_device_fn(device_fn: Any) -> None:
    if device_fn is None:
        return
    message = (f"RunConfig `device_fn` is {device_fn!r}; device_fn must be callable with exactly one argument "
               '"op". Pass a function of one argument named op (op -> device string), or None.')
    if not callable(device_fn):
        raise _error(message, "device_fn")
    try:
        params = inspect.signature(device_fn).parameters
    except (TypeError, ValueError):
        return
    names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if names != ["op"]:  # TF compared the argument names with {"op"}
        raise _error(message, "device_fn")


def resolve_checkpoint_every(steps: Any, secs: Any) -> tuple[Any, Any]:
    """TF's rule: neither given means every 600 s; both None (explicitly) means no checkpoints."""
    if secs is USE_DEFAULT:
        secs = _DEFAULT_CHECKPOINT_SECS if steps in (None, USE_DEFAULT) else None
    if steps is USE_DEFAULT:
        steps = None
    if steps is not None and secs is not None:
        raise _error(f"RunConfig got both `save_checkpoints_steps` ({steps}) and `save_checkpoints_secs` ({secs}); "
                     "`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set: pass at most one "
                     "of them.", "save_checkpoints_steps")
    return steps, secs


def default_session_config(task_type: str, task_id: int) -> Any:
    """TF's between-graph default for a cluster task: soft placement, one graph-rewrite pass, device filters."""
    filters = {
        "master": ["/job:ps", "/job:master"],
        "chief": ["/job:ps", "/job:chief"],
        "worker": ["/job:ps", f"/job:worker/task:{task_id}"],
        "ps": ["/job:ps", "/job:worker", "/job:chief", "/job:master"],
    }.get(task_type)
    if filters is None:
        return None
    import tensorflow as tf

    proto = tf.compat.v1.ConfigProto(allow_soft_placement=True, device_filters=filters)
    proto.graph_options.rewrite_options.meta_optimizer_iterations = 1  # RewriterConfig.ONE
    return proto


def check_service(raw: Any) -> Any:
    service = raw.get("service") if isinstance(raw, dict) else None
    if service is not None and not isinstance(service, dict):
        raise RunConfigTypeError(f'If "service" is set in TF_CONFIG, it must be a dict. Given {service!r}: TF_CONFIG '
                                 '`service` should be a JSON object.', field="service")
    return service
