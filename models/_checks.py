"""The builders' one argument check (``models`` stands alone: it imports no other tfdist package)."""
from __future__ import annotations

__all__ = ["check_positive"]


def check_positive(value: object, *, field: str, owner: str, example: object = 1, fix: str = "") -> None:
    """Raises ``ValueError`` unless ``value`` is an int >= 1 (a bool is not a count).

    The message names the builder, the field, the value and a fix, e.g.
    "digits_cnn `num_classes` is 0; expected a positive integer. Pass e.g. num_classes=10."
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fix = fix or f"Pass e.g. {field}={example}."
        raise ValueError(f"{owner} `{field}` is {value!r}; expected a positive integer. {fix}")
