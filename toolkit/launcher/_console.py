"""What of a task's output reaches the console: everything but TensorFlow's C++ start-up noise.

Every task imports TensorFlow, and on a CPU machine each one prints the same
lines before doing anything: absl's pre-init warning, oneDNN and CPU-feature
notices, and failed CUDA probes (``cuInit``, "Could not find cuda drivers").
Times four tasks they bury the lines that matter, so the console leaves them
out while the task's log file keeps every line. ``--verbose``, or the user's
own ``TF_CPP_MIN_LOG_LEVEL`` (then TensorFlow itself decides), shows them all.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

# C++ log lines: absl's "I0000 00:00:1795354330.233572    7086 port.cc:153] ..." and the older
# "2024-01-01 12:00:00.000000: I tensorflow/core/util/port.cc:113] ...".
_CPP_LINE = re.compile(r"^(?:(?P<new>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |"
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<old>[IWEF]) )\S+:\d+\] (?P<text>.*)$")
# Warnings and errors that are noise on a machine without a GPU, and the warnings a server logs when a
# step's cross-task transfers are cleaned up before they were all consumed (a cancelled or finished step,
# e.g. when the chief ends the job): the rendezvous aborting, a pending RecvTensor cancelled.
_NOISY_TEXT = re.compile(r"cuInit|cuda|CUDA|cuDNN|cuFFT|cuBLAS|TF-TRT|TensorRT|computation placer already registered|"
                         r"Local rendezvous is aborting with status: (?:ABORTED|CANCELLED|OUT_OF_RANGE)|"
                         r"^RecvTensor cancelled for -?\d+$")
_NOISY_LINES = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"),
    re.compile(r"^To enable the following instructions: .* in other operations, rebuild TensorFlow with the "
               r"appropriate compiler flags\.$"),
)


def is_tensorflow_noise(line: str) -> bool:
    """True for a C++ info line, a GPU-probe warning or error, or absl's pre-init notice."""
    match = _CPP_LINE.match(line)
    if match:
        level = match.group("new") or match.group("old")
        return level == "I" or (level in "WE" and bool(_NOISY_TEXT.search(match.group("text"))))
    return any(pattern.match(line) for pattern in _NOISY_LINES)


# A protobuf text dump continuing a C++ line ("SessionOptions: ..." then "device_count {", ...).
_PROTO_OPEN = re.compile(r"[a-z_][a-z0-9_]* \{")
_PROTO_FIELD = re.compile(r"[a-z_][a-z0-9_]*: (?:true|false|-?[0-9.e+-]+|\".*\"|[A-Z_][A-Z0-9_]*)")


class NoiseFilter:
    """Says which lines of one task's output to keep off the console.

    One per task: a C++ log message may go on over several lines (a protobuf
    dump of the session options), and those lines go with it.
    """

    def __init__(self) -> None:
        self._depth: int | None = None  # None: not after noise; -1: a dump may start; n: inside one

    def __call__(self, line: str) -> bool:
        if self._depth is not None and self._continues(line.strip()):
            return True
        self._depth = None
        if is_tensorflow_noise(line):
            self._depth = -1 if _CPP_LINE.match(line) else None
            return True
        return False

    def _continues(self, text: str) -> bool:
        depth = self._depth if self._depth is not None else -1
        if _PROTO_OPEN.fullmatch(text):
            self._depth = max(depth, 0) + 1
            return True
        if depth < 0:  # only a message opener starts a dump
            return False
        if text == "}":
            self._depth = depth - 1
            return depth > 0
        if depth > 0:  # inside a message: its fields
            return True
        return not text or bool(_PROTO_FIELD.fullmatch(text))  # between top-level fields


def console_filter(env: Mapping[str, str], *, verbose: bool) -> Callable[[], Callable[[str], bool]] | None:
    """A factory of per-task filters of lines to keep off the console, or None to show every line.

    ``env`` is the tasks' environment: a ``TF_CPP_MIN_LOG_LEVEL`` there is the
    user's own choice, and TensorFlow applies it.
    """
    if verbose or env.get("TF_CPP_MIN_LOG_LEVEL", "").strip():
        return None
    return NoiseFilter
