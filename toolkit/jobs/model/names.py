"""Job names: one string that becomes a directory, a SQLite key and a Kubernetes name.

A name is safe in all three places only if it is a DNS-1035 label, the rule
Kubernetes applies to Service names (a TFJob creates one Service per replica,
``<job>-worker-0``). Checking it once, up front, means no path trick (``../x``,
``a/b``) or shell-looking name ever reaches the file system or ``kubectl``.
"""
from __future__ import annotations

import re

from toolkit.jobs.errors import JobNameError, Problem, show

__all__ = ["validate_job_name", "suggest_job_name", "MAX_NAME_LENGTH"]

MAX_NAME_LENGTH = 63
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_RULE = ("a DNS-1035 label: lowercase letters, digits and '-', starting with a letter, "
         f"ending with a letter or digit, at most {MAX_NAME_LENGTH} characters")


def suggest_job_name(name: str) -> str:
    """Returns the closest valid name (``My_Job.1`` -> ``my-job-1``)."""
    text = re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")
    if not text or not text[0].isalpha():
        text = f"job-{text}" if text else "job"
    return text[:MAX_NAME_LENGTH].rstrip("-")


def validate_job_name(name: object, *, field: str = "job") -> str:
    """Returns ``name`` if it is a valid job name, else raises ``JobNameError``.

    Example:
        >>> validate_job_name("mnist-run-1")
        'mnist-run-1'
    """
    if not isinstance(name, str) or not name:
        raise JobNameError([Problem("error", field, f"received {show(name)}; a job name must be {_RULE}. "
                                                    "Pass a name such as 'mnist-run-1'.")])
    why = _why_invalid(name)
    if why:
        raise JobNameError([Problem(
            "error", field,
            f"received {show(name)}; a job name becomes a directory and a Kubernetes name, so it must be "
            f"{_RULE}; {why}. Use {suggest_job_name(name)!r} instead.",
        )])
    return name


def _why_invalid(name: str) -> str:
    if len(name) > MAX_NAME_LENGTH:
        return f"this one has {len(name)} characters"
    if _DNS_1035.fullmatch(name):
        return ""
    bad = sorted(set(re.sub(r"[-a-z0-9]", "", name)))
    if bad:
        return f"{', '.join(map(repr, bad))} {'is' if len(bad) == 1 else 'are'} not allowed"
    if not name[0].isalpha():
        return "it must start with a letter"
    return "it must end with a letter or digit"
