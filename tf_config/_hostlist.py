"""Slurm's compact host and task-count syntax, expanded: ``h[01-03,7],gpu1`` and ``2(x3),1``.

Example:
    >>> expand_hostlist("node[08-10],gpu[1,3]")
    ['node08', 'node09', 'node10', 'gpu1', 'gpu3']
    >>> expand_counts("2(x3),1")
    [2, 2, 2, 1]
"""
from __future__ import annotations

import re

from ._errors import Problem, TFConfigError

__all__ = ["expand_counts", "expand_hostlist"]

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _bad(field: str, value: str, why: str) -> TFConfigError:
    return TFConfigError([Problem("error", field, f"is {value!r}; {why}")])


def _split_top(text: str) -> list[str]:
    """Splits on commas outside brackets (``a[1,2],b`` -> ``a[1,2]``, ``b``)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError("unbalanced or nested brackets")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("an unclosed bracket")
    parts.append(text[start:])
    return parts


def _expand_one(item: str) -> list[str]:
    """``pre[1-3,7]post[a]`` style: each bracket group multiplies the names."""
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        if not item or "]" in item:
            raise ValueError(f"an empty or malformed host name {item!r}")
        return [item]
    head, tail = item[:match.start()], item[match.end():]
    names = []
    for part in match.group(1).split(","):
        rng = _RANGE.match(part.strip())
        if rng is None:
            raise ValueError(f"the range {part!r} in {item!r} is not N or N-M")
        low, high = rng.group(1), rng.group(2) or rng.group(1)
        if int(high) < int(low):
            raise ValueError(f"the range {part!r} in {item!r} runs backwards")
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        names += [f"{head}{n:0{width}d}" for n in range(int(low), int(high) + 1)]
    return [name + rest for name in names for rest in _expand_one(tail)] if tail else names


def expand_hostlist(text: str, *, field: str = "SLURM_STEP_NODELIST") -> list[str]:
    """Every host of a Slurm hostlist, in order (zero padding kept: ``n[08-10]``)."""
    try:
        hosts = [host for item in _split_top(text.strip()) for host in _expand_one(item.strip())]
    except ValueError as exc:
        raise _bad(field, text, f"expected a Slurm hostlist such as 'node[01-04],gpu7' ({exc}).") from None
    return hosts


def expand_counts(text: str, *, field: str = "SLURM_STEP_TASKS_PER_NODE") -> list[int]:
    """Slurm's per-node task counts (``2(x3),1`` -> ``[2, 2, 2, 1]``)."""
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _COUNT.match(part.strip())
        if match is None:
            raise _bad(field, text, "expected per-node task counts such as '2(x3),1'.")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts
