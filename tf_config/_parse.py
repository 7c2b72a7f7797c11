"""From whatever the caller holds (JSON text, a mapping, a TFConfig) to a plain dict.

Parsing never raises: a document that cannot be read becomes a Problem, so
``validate`` can report it like any other.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._errors import Problem
from ._suggest import show
from .limits import MAX_FILE_BYTES

DOC = "TF_CONFIG"


_MAX_INT_DIGITS = 20  # an int64 has 19; int() of 5,000 digits would pass Python's digit limit


def _small_int(text: str) -> int:
    """JSON's integers, bounded before ``int()`` (which would refuse 4,301 digits with a traceback's words)."""
    if len(text.lstrip("-").lstrip("0")) > _MAX_INT_DIGITS:
        raise ValueError(f"a number of {len(text):,} digits ({text[:12]}...)")
    return int(text)


def parse_document(doc: Any, *, strict: bool = False) -> tuple[dict | None, list[Problem]]:
    """Return ``(top-level dict or None, problems)``; None means nothing more can be checked."""
    to_dict = getattr(doc, "to_dict", None)
    if callable(to_dict) and not isinstance(doc, Mapping):
        doc = to_dict()
    if isinstance(doc, bytes):
        try:
            doc = doc.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, [Problem("error", DOC, f"TF_CONFIG is not UTF-8 text ({exc.reason}). Save it as UTF-8.")]
    if isinstance(doc, str):
        return _parse_text(doc, strict)
    if isinstance(doc, Mapping):
        return dict(doc), []
    return None, [_not_an_object(doc)]


def _not_an_object(value: Any) -> Problem:
    return Problem(
        "error", DOC,
        f"TF_CONFIG must be a JSON object ({{\"cluster\": ..., \"task\": ...}}); "
        f"received a {type(value).__name__}: {show(value)}. Wrap the settings in one object.",
    )


def _parse_text(text: str, strict: bool) -> tuple[dict | None, list[Problem]]:
    if not text.strip():
        return None, [Problem(
            "error", DOC,
            "TF_CONFIG is empty; expected a JSON object. Unset TF_CONFIG for a one-process run, "
            "or generate one with `tf_config.generate()`.",
        )]
    if len(text) > MAX_FILE_BYTES:
        return None, [Problem("error", DOC, f"TF_CONFIG has {len(text):,} characters; tfdist reads at most "
                                            f"{MAX_FILE_BYTES:,}. A real TF_CONFIG is a few KiB: check what "
                                            "was passed.")]
    duplicates: list[str] = []

    def _pairs(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                duplicates.append(key)
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_int=_small_int)
    except json.JSONDecodeError as exc:
        return None, [_json_problem(text, exc)]
    except RecursionError:
        return None, [Problem("error", DOC, "TF_CONFIG nests too deeply to be a TF_CONFIG. Flatten it.")]
    except ValueError as exc:  # _small_int refuses numbers longer than any index or port
        return None, [Problem("error", DOC, f"TF_CONFIG has {exc}. Task indexes and ports are small integers: "
                                            "fix the number.")]
    problems = [
        Problem(
            "error" if strict else "warning", DOC,
            f"TF_CONFIG has the key {key!r} twice in one object; JSON keeps only the last one. "
            "Merge the two entries into one.",
        )
        for key in dict.fromkeys(duplicates)
    ]
    if not isinstance(data, dict):
        return None, problems + [_not_an_object(data)]
    return data, problems


def _json_problem(text: str, exc: json.JSONDecodeError) -> Problem:
    around = text[max(0, exc.pos - 20): exc.pos + 20].replace("\n", " ")
    hint = "Check for missing commas, trailing commas and unbalanced brackets."
    if "'" in text and '"' not in text.strip()[:2]:
        hint = "JSON needs double quotes around keys and strings, not single quotes."
    return Problem(
        "error", DOC,
        f"TF_CONFIG is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
        f"(near {around!r}). {hint}",
    )
