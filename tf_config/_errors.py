"""TF_CONFIG's error: the problem-list error of :mod:`tf_config.errors`, titled for TF_CONFIG."""
from __future__ import annotations

from .errors import Problem, ProblemsError, Severity, errors_of

__all__ = ["Problem", "Severity", "TFConfigError", "errors_of"]


class TFConfigError(ProblemsError):
    """A TF_CONFIG (or a request about one) is invalid; its attributes are ``ProblemsError``'s."""

    title = "invalid TF_CONFIG"
