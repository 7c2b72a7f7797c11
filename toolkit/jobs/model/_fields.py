"""Reads untrusted mappings field by field, collecting every problem.

A job spec is usually wrong in several places at once; reporting them one per
run wastes the user's time, so readers record a ``Problem`` and return a safe
fallback instead of raising. The spec builder raises once, at the end.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from toolkit.jobs.errors import Problem, did_you_mean, show

_INT_TEXT = re.compile(r"[+-]?\d{1,18}")  # int() reads these; longer would not fit an int64 anyway


class FieldReader:
    """Collects problems while reading fields of nested mappings.

    Field paths are dotted (``trainingInput.hyperparameters.params[0].type``),
    matching what the user wrote, so an error points at the line to change.
    """

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def error(self, field: str, value: object, expected: str, fix: str) -> None:
        self.problems.append(
            Problem("error", field, f"received {show(value)}; expected {expected}. {fix}"))

    def missing(self, field: str, expected: str, fix: str) -> None:
        self.problems.append(Problem("error", field, f"is missing; expected {expected}. {fix}"))

    def fail(self, field: str, message: str) -> None:
        self.problems.append(Problem("error", field, message))

    def warn(self, field: str, message: str) -> None:
        self.problems.append(Problem("warning", field, message))

    def mapping(self, value: object, path: str) -> Mapping[str, Any]:
        """``value`` if it is a mapping with string keys, else ``{}`` and an error."""
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            self.error(path, value, "a mapping of field names to values",
                       f"Write `{path}` as a YAML/JSON object.")
            return {}
        return value

    def check_keys(self, doc: Mapping[str, Any], path: str, allowed: Iterable[str]) -> None:
        """Warns about every key of ``doc`` not in ``allowed``, with a did-you-mean hint.

        A warning, not an error: CMLE adds fields over time, and a config that
        runs there must not be turned away here for a field tfdist ignores.
        """
        allowed = sorted(allowed)
        for key in doc:
            if key not in allowed:
                where = f"{path}.{key}" if path else key
                self.warn(where, f"unknown field {key!r} is ignored.{did_you_mean(key, allowed)} "
                                 f"Valid fields{' of ' + path if path else ''}: {', '.join(allowed)}.")

    def integer(self, doc: Mapping[str, Any], key: str, path: str, *, default: int | None,
                minimum: int | None = None, maximum: int | None = None, fix: str = "") -> int | None:
        """Reads an integer; CMLE's JSON writes int64 as strings ("4"), so those count too."""
        value = doc.get(key)
        if value is None:
            return default
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
            number = int(value)
        low_ok = number is not None and (minimum is None or number >= minimum)
        high_ok = number is not None and (maximum is None or number <= maximum)
        if low_ok and high_ok:
            return number
        bounds = _bounds(minimum, maximum)
        self.error(f"{path}.{key}", value, f"an integer{bounds}",
                   fix or f"Set `{key}` to an integer{bounds}.")
        return default

    def number(self, doc: Mapping[str, Any], key: str, path: str) -> float | None:
        value = doc.get(key)
        if value is None:
            return None
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                number = float(value)
            except (ValueError, OverflowError):
                number = math.nan
            if math.isfinite(number):
                return number
        self.error(f"{path}.{key}", value, "a number", f"Set `{key}` to a number such as 0.01.")
        return None

    def string(self, doc: Mapping[str, Any], key: str, path: str, *,
               pattern: re.Pattern[str] | None = None, expected: str = "a non-empty string",
               fix: str = "") -> str | None:
        value = doc.get(key)
        if value is None:
            return None
        if isinstance(value, str) and value and (pattern is None or pattern.fullmatch(value)):
            return value
        self.error(f"{path}.{key}", value, expected, fix or f"Set `{key}` to {expected}.")
        return None

    def boolean(self, doc: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
        value = doc.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        self.error(f"{path}.{key}", value, "true or false",
                   f"Write `{key}: true` or `{key}: false` (no quotes).")
        return default

    def choice(self, doc: Mapping[str, Any], key: str, path: str, choices: Iterable[str], *,
               default: str | None) -> str | None:
        value = doc.get(key)
        if value is None:
            return default
        choices = list(choices)
        if isinstance(value, str) and value.upper() in choices:
            return value.upper()
        self.error(f"{path}.{key}", value, f"one of {', '.join(choices)}",
                   f"Pick one of the listed values.{did_you_mean(value, choices)}")
        return default

    def string_list(self, doc: Mapping[str, Any], key: str, path: str, *,
                    scalars_ok: bool = False) -> tuple[str, ...]:
        """Reads a list of strings; with ``scalars_ok`` numbers become strings (for args)."""
        value = doc.get(key)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)):
            self.error(f"{path}.{key}", value, "a list of strings",
                       f"Write `{key}` as a YAML list, one item per line starting with '- '.")
            return ()
        items: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                items.append(item)
            elif scalars_ok and isinstance(item, (int, float)) and not isinstance(item, bool):
                items.append(str(item))
            else:
                self.error(f"{path}.{key}[{i}]", item, "a string",
                           "Quote the item so YAML reads it as text (e.g. '--flag=true').")
        return tuple(items)


def _bounds(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""
