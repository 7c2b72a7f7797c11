"""gcloud's ``--filter``, ``--sort-by``, ``--limit`` and ``--format`` for `tfdist jobs list` and `describe`.

A subset of gcloud's topic filters and formats, enough for the commands users
script against ``gcloud ai-platform jobs``:

* ``--filter``: terms ``KEY=VALUE``, ``KEY!=VALUE``, ``KEY:VALUE`` (``:`` matches a
  word of the value, ``*`` a glob), joined by spaces or ``AND``, ``OR``
  between groups, ``NOT`` before a term. Keys are the JSON record's
  (``state``, ``jobId``, ``labels.team``, ``trainingInput.scaleTier``, ...),
  and values compare case-insensitively, as gcloud's do.
* ``--sort-by``: ``KEY[,~KEY]`` (``~`` descending).
* ``--format``: ``json``, ``yaml``, ``value(KEY,...)`` (tab-separated, one line
  per job), and tfdist's ``table`` / ``text``.

Anything else is refused with the form that works.
"""
from __future__ import annotations

import fnmatch
import functools
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["FormatError", "filter_records", "render", "sort_records"]

_TERM = re.compile(r"(?P<key>[A-Za-z_][\w.]*)\s*(?P<op>!=|=|:|~)\s*(?P<value>.*)")
_VALUE = re.compile(r"value\((?P<keys>[^)]*)\)")


class FormatError(ValueError):
    """A ``--filter``, ``--sort-by`` or ``--format`` this command cannot read."""


def _get(doc: Mapping[str, Any], key: str) -> Any:
    value: Any = doc
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _matches(doc: Mapping[str, Any], term: str) -> bool:
    match = _TERM.fullmatch(term)
    if match is None:
        raise FormatError(f"--filter: cannot read the term {term!r}; expected KEY=VALUE, KEY!=VALUE, KEY:VALUE "
                          "or KEY~REGEX, e.g. state=RUNNING or labels.team:ml")
    key, op, want = match.group("key"), match.group("op"), match.group("value").strip().strip("\"'")
    got = _get(doc, key)
    text = "" if got is None else (json.dumps(got) if isinstance(got, (Mapping, list)) else str(got))
    if op == "~":
        return re.search(want, text) is not None
    if op == ":":
        words = re.split(r"[^\w*.@-]+", text.lower())
        return (want == "*" and got is not None) or any(fnmatch.fnmatchcase(w, want.lower()) for w in words)
    equal = fnmatch.fnmatchcase(text.lower(), want.lower())
    return equal if op == "=" else not equal


def _clause(doc: Mapping[str, Any], words: list[str]) -> bool:
    result, negate = True, False
    for word in words:
        if word.upper() == "AND":
            continue
        if word.upper() == "NOT" or word == "-":
            negate = True
            continue
        if word.startswith("-"):
            word, negate = word[1:], True
        result = result and (_matches(doc, word) != negate)
        negate = False
    return result


def filter_records(docs: Sequence[Mapping[str, Any]], expression: str | None) -> list[Mapping[str, Any]]:
    """The records (as JSON documents) that ``expression`` selects."""
    if not expression:
        return list(docs)
    try:
        words = shlex.split(expression.replace("(", " ").replace(")", " "))
    except ValueError as exc:
        raise FormatError(f"--filter: {exc}; quote values with spaces") from None
    groups: list[list[str]] = [[]]
    for word in words:
        if word.upper() == "OR":
            groups.append([])
        else:
            groups[-1].append(word)
    return [doc for doc in docs if any(_clause(doc, group) for group in groups if group)]


def sort_records(docs: list[Mapping[str, Any]], sort_by: str | None) -> list[Mapping[str, Any]]:
    """``docs`` ordered by ``KEY[,~KEY]`` (the last key varies fastest); missing values sort first."""
    for key in reversed([k.strip() for k in (sort_by or "").split(",") if k.strip()]):
        descending = key.startswith("~")
        key = key.lstrip("~")
        docs = sorted(docs, key=functools.partial(_sort_key, key=key), reverse=descending)
    return docs


def _sort_key(doc: Mapping[str, Any], key: str) -> tuple[bool, str]:
    value = _get(doc, key)
    return value is not None, "" if value is None else str(value)


def render(docs: Sequence[Mapping[str, Any]], fmt: str, *, many: bool) -> str | None:
    """``docs`` in gcloud's ``json``, ``yaml`` or ``value(...)``; None for tfdist's own table/text."""
    if fmt in ("table", "text"):
        return None
    if fmt == "json":
        return json.dumps(list(docs) if many else docs[0], indent=2)
    if fmt == "yaml":
        return "---\n".join(yaml.safe_dump(dict(d), sort_keys=False) for d in docs).rstrip()
    value = _VALUE.fullmatch(fmt.strip())
    if value is None:
        raise FormatError(f"--format: received {fmt!r}; expected json, yaml, value(KEY,...) or "
                          f"{'table' if many else 'text'}, e.g. --format 'value(jobId,state)'")
    keys = [k.strip() for k in value.group("keys").split(",") if k.strip()]
    return "\n".join("\t".join(_cell(_get(d, k)) for k in keys) for d in docs)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (Mapping, list)) else str(value)
