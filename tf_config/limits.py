"""The sizes tfdist accepts from a file, a TF_CONFIG or a job spec, in one place.

Every input is bounded so that no document, however written, makes a parser
or a renderer run for minutes or eat the machine's memory: a file is refused
before it is read past ``MAX_FILE_BYTES``, YAML before its aliases are
expanded, and a job spec before anything is started. The limits are far above
what a real job needs; the docs list them (docs/security.md).
"""
from __future__ import annotations

import os

__all__ = ["MAX_FILE_BYTES", "MAX_LIST_ITEMS", "MAX_NESTING", "MAX_STRING", "MAX_TASKS", "MAX_YAML_ALIASES",
           "MAX_YAML_NODES", "InputTooLargeError", "decode", "read_text"]

MAX_TASKS = 1_000            # tasks of one kind in a job or a launch (every TF_CONFIG lists them all)
MAX_FILE_BYTES = 1 << 20     # a job spec or TF_CONFIG file: 1 MiB
MAX_NESTING = 64             # objects and lists inside each other, in YAML or JSON
MAX_YAML_ALIASES = 1_000     # `*name` references in one YAML document
MAX_YAML_NODES = 100_000     # values in one YAML document once every alias is expanded
MAX_STRING = 64 * 1024       # characters in one string field (a trainer argument, a path)
MAX_LIST_ITEMS = 10_000      # items in one list field (args, packageUris)


class InputTooLargeError(ValueError):
    """A file or stream is longer than ``MAX_FILE_BYTES``."""


def read_text(path: str | os.PathLike[str]) -> str:
    """A UTF-8 file's text, refused past ``MAX_FILE_BYTES`` without reading the rest.

    Raises:
        OSError: the file cannot be opened or read.
        InputTooLargeError: it is bigger than the limit.
        UnicodeDecodeError: it is not UTF-8.
    """
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    return decode(data)


def decode(data: bytes) -> str:
    """``data`` as UTF-8 text, refused past ``MAX_FILE_BYTES``."""
    if len(data) > MAX_FILE_BYTES:
        raise InputTooLargeError(f"it is larger than the {MAX_FILE_BYTES:,} bytes tfdist reads")
    return data.decode("utf-8")
