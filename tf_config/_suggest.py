"""Did-you-mean hints and the short form of a received value, so a typo costs one glance.

Both run on whatever a user (or an attacker) handed us, so both are bounded:
``show`` never builds a full ``repr`` of a big or deeply nested value (a YAML
alias bomb expands to billions of strings), and neither raises.
"""
from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable

_MATCH_LIMIT = 200  # difflib is quadratic in the string's length: long values get no hint


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """A `` Did you mean 'x'?`` suffix, or an empty string when nothing is close.

    Example:
        >>> did_you_mean("workers", ["chief", "worker", "ps"])
        " Did you mean 'worker'?"
    """
    if not isinstance(value, str) or len(value) > _MATCH_LIMIT:
        return ""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if value.lower() in lowered:
        return f" Did you mean {lowered[value.lower()]!r}?"
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=0.6)
    return f" Did you mean {lowered[close[0]]!r}?" if close else ""


class _Short(reprlib.Repr):
    """``reprlib`` with room for a few items per level; huge integers shown by their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple = 4, 8, 8, 8  # <= 8**4 items
        self.maxset = self.maxfrozenset = self.maxdeque = self.maxarray = 8
        self.maxother = 200

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[:200])  # the caller cuts it to its limit; only a prefix is ever shown

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 200:  # repr() of a 5,000-digit int raises; of a 400-digit one floods
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


_SHORT = _Short()


def show(value: object, limit: int = 80) -> str:
    """``repr`` of a received value, shortened so one bad field cannot flood a terminal.

    Example:
        >>> show(10 ** 400)
        '<an integer of about 401 digits>'
    """
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a value whose __repr__ fails still gets named
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
