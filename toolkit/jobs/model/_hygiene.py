"""One pass over a raw job config before any field is read: values no field can use are refused.

The readers (``_cmle``, ``_vertex``, ``hyperparams``) check what each field
means; this pass checks what no field may hold, whatever it means, so that no
reader has to guard against it: numbers beyond 64 bits (``int()`` of 5,000
digits raises, ``float(10**400)`` overflows), NaN and infinities, strings with
NUL bytes (no path, argument or environment variable can carry one) or lone
surrogates (no file system or terminal encodes them), and documents too long,
too wide or too deep (see :mod:`tf_config.limits`). It walks without
recursion and stops at the limits, so a self-referencing list built in Python
ends here too.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from tf_config.limits import MAX_LIST_ITEMS, MAX_NESTING, MAX_STRING, MAX_YAML_NODES
from toolkit.jobs.errors import Problem, show

__all__ = ["MAX_INT", "check_values"]

MAX_INT = 2 ** 63 - 1  # what an int64 field (CMLE's counts, Kubernetes' replicas) can hold
_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")
# Fields that name files or directories, and what Linux allows of one (PATH_MAX, NAME_MAX).
_PATH_KEYS = frozenset({"jobDir", "packagePath", "packageUris", "outputUriPrefix", "baseOutputDirectory"})
_PATH_BYTES, _NAME_BYTES = 4096, 255


def check_values(doc: object, root: str = "") -> list[Problem]:
    """Every value in ``doc`` no field can use, as errors naming its path; empty when all is well."""
    problems: list[Problem] = []
    seen = 0
    stack: list[tuple[object, str, int, bool]] = [(doc, root, 0, False)]
    while stack and len(problems) < 20:
        value, path, depth, is_path = stack.pop()
        seen += 1
        if seen > MAX_YAML_NODES:
            problems.append(_problem(root or "job config", value, f"a config of at most {MAX_YAML_NODES:,} values",
                                     "Remove what the job does not need."))
            break
        where = path or "job config"
        if depth > MAX_NESTING:
            problems.append(Problem("error", where, f"nests deeper than {MAX_NESTING} levels; no field of a job "
                                                    "config does. Flatten it."))
            continue
        if isinstance(value, Mapping):
            items = list(value.items())[: MAX_LIST_ITEMS + 1]
            problems += _too_many(where, value, len(items))
            for key, child in reversed(items[:MAX_LIST_ITEMS]):
                if isinstance(key, str):
                    problems += _text(f"{where} key", key)
                stack.append((child, f"{path}.{key}" if path else str(key), depth + 1, key in _PATH_KEYS))
        elif isinstance(value, (list, tuple)):
            problems += _too_many(where, value, len(value))
            stack.extend((child, f"{path}[{i}]", depth + 1, is_path)
                         for i, child in reversed(list(enumerate(value[:MAX_LIST_ITEMS]))))
        elif isinstance(value, str):
            problems += _text(where, value) or (_path(where, value) if is_path else [])
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and abs(value) > MAX_INT:
            problems.append(_problem(where, value, f"a number of at most {MAX_INT:,}", "Use a smaller number."))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(_problem(where, value, "a finite number", "Write the number itself (no NaN or inf)."))
    return problems


def _too_many(where: str, value: object, count: int) -> list[Problem]:
    if count <= MAX_LIST_ITEMS:
        return []
    return [Problem("error", where, f"has more than {MAX_LIST_ITEMS:,} items; no field of a job config "
                                    "needs that many. Shorten it.")]


def _text(where: str, text: str) -> list[Problem]:
    if len(text) > MAX_STRING:
        return [Problem("error", where, f"is a string of {len(text):,} characters; at most {MAX_STRING:,} are "
                                        "accepted. Put long content in a file the trainer reads.")]
    bad = _BAD_TEXT.search(text)
    if bad is None:
        return []
    what = "a NUL byte" if bad.group() == "\x00" else "a lone surrogate (not valid Unicode)"
    return [_problem(where, text, f"text without {what}", "Remove the character; no path, argument "
                     "or name can carry it.")]


def _path(where: str, text: str) -> list[Problem]:
    data = text.encode("utf-8")
    if len(data) <= _PATH_BYTES and all(len(part) <= _NAME_BYTES for part in data.split(b"/")):
        return []
    return [_problem(where, text, f"a path of at most {_PATH_BYTES:,} bytes, each name in it at most "
                     f"{_NAME_BYTES}", "Shorten the path.")]


def _problem(where: str, value: Any, expected: str, fix: str) -> Problem:
    return Problem("error", where, f"received {show(value)}; expected {expected}. {fix}")
