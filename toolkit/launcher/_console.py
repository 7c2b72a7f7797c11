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
# Warnings and errors that are noise on a machine without a GPU.
_NOISY_TEXT = re.compile(r"cuInit|cuda|CUDA|cuDNN|cuFFT|cuBLAS|TF-TRT|TensorRT|computation placer already registered")
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


def console_filter(env: Mapping[str, str], *, verbose: bool) -> Callable[[str], bool] | None:
    """The predicate of lines to keep off the console, or None to show every line.

    ``env`` is the tasks' environment: a ``TF_CPP_MIN_LOG_LEVEL`` there is the
    user's own choice, and TensorFlow applies it.
    """
    if verbose or env.get("TF_CPP_MIN_LOG_LEVEL", "").strip():
        return None
    return is_tensorflow_noise
