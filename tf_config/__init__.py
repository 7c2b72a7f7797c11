"""The cluster as data: parse, validate, generate and explain TF_CONFIG.

Pure Python. Importing this package never imports TensorFlow, so the CLI and
launchers can check a TF_CONFIG in milliseconds before paying for TensorFlow.

Example:
    >>> from tf_config import TFConfig, validate
    >>> cfg = TFConfig.from_env({})     # no TF_CONFIG: a one-process run
    >>> cfg.is_local, cfg.is_chief
    (True, True)
"""
from ._errors import Problem, TFConfigError
from ._explain import explain
from ._from_env import EnvTFConfig, Layout, from_env
from ._generate import DIALECTS, generate
from ._hostlist import expand_hostlist
from ._model import Task, TFConfig, recommend_strategy
from ._render import FORMATS, render
from ._rules_strategy import STRATEGIES
from ._validate import validate
from .errors import FieldError, ProblemsError

__all__ = [
    "DIALECTS",
    "EnvTFConfig",
    "FORMATS",
    "FieldError",
    "Layout",
    "Problem",
    "ProblemsError",
    "STRATEGIES",
    "TFConfig",
    "TFConfigError",
    "Task",
    "expand_hostlist",
    "explain",
    "from_env",
    "generate",
    "recommend_strategy",
    "render",
    "validate",
]
