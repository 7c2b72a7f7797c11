"""The exceptions of ``toolkit.jobs``: one family, rooted at ``JobError``.

Bad input (a spec, a name, a flag) raises ``JobSpecError`` carrying every
problem found, each in the house style: the field path, the value received,
what is valid, and how to fix it. Runtime conditions (no such job, a backend
that is unavailable) have their own subclasses so the CLI can map them onto
distinct exit codes.
"""
from __future__ import annotations

from tf_config.errors import Problem, ProblemsError, did_you_mean, show

__all__ = [
    "JobError", "JobSpecError", "JobNameError", "JobNotFoundError", "JobExistsError",
    "JobStateError", "BackendError", "Problem", "did_you_mean", "refuse_invalid", "show",
]


class JobError(Exception):
    """Base class of every error raised by ``toolkit.jobs``."""


class JobSpecError(JobError, ProblemsError):
    """A job spec, name or option is invalid (the problem-list error of ``tf_config.errors``).

    Attributes:
        problems: every problem found, errors first, then warnings.
        field: the field path of the first error, e.g. ``"trainingInput.workerCount"``.
    """

    title = "invalid job spec"


class JobNameError(JobSpecError):
    """A job name is not a DNS-1035 label."""


class JobNotFoundError(JobError, LookupError):
    """No job of that name exists in the store (or on the cluster)."""


class JobExistsError(JobError):
    """A job of that name was already submitted; names are unique, as on CMLE."""


class JobStateError(JobError):
    """The job is not in a state that allows the request (e.g. cancelling a finished job)."""


class BackendError(JobError):
    """The backend cannot do what was asked (no ``kubectl``, no context, a failed command).

    Attributes:
        manifest_path: where the rendered manifest was written, when there is one,
            so the user can apply it by hand.
    """

    def __init__(self, message: str, *, manifest_path: str | None = None) -> None:
        super().__init__(message)
        self.manifest_path = manifest_path


def refuse_invalid(headline: str, errors: list[str]) -> None:
    """Raises ``BackendError`` (``headline``, then each error on a line) when a rendered manifest has any."""
    if errors:
        raise BackendError(f"{headline}:\n  " + "\n  ".join(errors))
