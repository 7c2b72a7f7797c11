"""The one error family of tfdist, in its lowest layer so every package shares it.

Every error for bad input is a :class:`FieldError`: a ``ValueError`` that names
the field at fault (``.field``) and whose message shows the value received,
what was expected and how to fix it. Validators that find several things wrong
at once raise a :class:`ProblemsError`, which carries every :class:`Problem`
(``TFConfigError``, ``JobSpecError`` and ``DeviceMapError`` are ones). The
field is the Python argument or the spec field; the CLI maps it to its flag.

Example:
    >>> try:
    ...     raise FieldError("`workers` is -1; expected an integer >= 0.", field="workers")
    ... except ValueError as exc:
    ...     print(exc.field)
    workers
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._suggest import did_you_mean, show

__all__ = ["FieldError", "Problem", "ProblemsError", "Severity", "did_you_mean", "errors_of", "printable", "show"]

Severity = Literal["error", "warning"]

# What a message must not carry to a terminal: lone surrogates (a UTF-8 stream refuses them),
# NUL and the other control characters (escape sequences rewrite the screen), but not newlines.
_UNPRINTABLE = re.compile(r"[\ud800-\udfff\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every surrogate and control character (but newline and tab) escaped.

    Messages quote what the user sent, and a field name may be a key the user
    chose, so anything printed is made safe to print once, here.

    Example:
        >>> print(printable("a" + chr(0) + "b" + chr(0xDC80)))
        a\\x00b\\udc80
    """
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class FieldError(ValueError):
    """Bad input, in the house style.

    Attributes:
        field: the argument or spec field at fault, e.g. ``"epochs"`` or
            ``"trainingInput.workerCount"``; the CLI rewrites it to its flag.
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(printable(message))
        self.field = printable(field)


@dataclass(frozen=True)
class Problem:
    """One finding of a validator.

    Attributes:
        severity: ``"error"`` makes the input unusable; ``"warning"`` is
            legal but probably not what the user meant.
        field: dotted path of the offending field, e.g. ``"task.index"`` or
            ``"cluster.worker[1]"``; ``"TF_CONFIG"`` for the document itself.
        message: names the field, shows the value received, says what was
            expected and how to fix it.
    """

    severity: Severity
    field: str
    message: str

    def __post_init__(self) -> None:
        if self.severity not in ("error", "warning"):
            raise ValueError(
                f"Problem `severity` is {self.severity!r}; expected 'error' or 'warning'."
            )
        object.__setattr__(self, "field", printable(self.field))
        object.__setattr__(self, "message", printable(self.message))

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        return f"{self.severity}: {self.field}: {self.message}"


def errors_of(problems: Iterable[Problem]) -> list[Problem]:
    """The problems that make the input unusable."""
    return [p for p in problems if p.is_error]


class ProblemsError(FieldError):
    """Everything a validator found wrong, raised together.

    Input is usually wrong in more than one place at once (a typo in a job
    name cascades into a task type that is "not in the cluster"), so
    validators collect every problem before raising one of these.

    Attributes:
        problems: every problem found, errors first in document order, then
            warnings; the warnings are kept so callers can show them too.
        field: the field of the first error, for code that only wants one.
    """

    #: what was invalid, the head of the message ("invalid TF_CONFIG: ...").
    title: ClassVar[str] = "invalid input"

    def __init__(self, problems: Iterable[Problem]) -> None:
        problems = list(problems)
        errors = errors_of(problems)
        if not errors:
            raise ValueError(f"{type(self).__name__} needs at least one error-severity Problem.")
        self.problems: list[Problem] = errors + [p for p in problems if not p.is_error]
        super().__init__(self._summary(errors), field=errors[0].field)

    def _summary(self, errors: list[Problem]) -> str:
        if len(errors) == 1:
            return f"{self.title}: {errors[0].field}: {errors[0].message}"
        lines = [f"{self.title} ({len(errors)} errors):"]
        lines.extend(f"  - {p.field}: {p.message}" for p in errors)
        return "\n".join(lines)
