"""The CLI speaks flags: library errors name Python arguments and spec fields, this maps them.

The library writes the arguments it means in backticks, as Python: an argument
`` `ps=1` ``, a call `` `tf_config.generate(chief=1, ps=1)` ``, and names the
field at fault in ``FieldError.field`` / ``Problem.field``. A command gives
:func:`error_text` / :func:`speak_flags` its table of ``{argument or field: flag}``
and the user reads ``--ps 1``, ``tfdist tf-config generate --chief 1 --ps 1``
and ``--backend``. Text the table does not cover is left as the library wrote it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from tf_config.errors import FieldError, Problem, ProblemsError

__all__ = ["COMMANDS", "GENERATE_FLAGS", "JOBS_FLAGS", "LAUNCH_FLAGS", "LOCAL_TRAIN_FLAGS", "error_text",
           "problem_text", "speak_flags"]

#: library calls named in messages -> the command that does the same
COMMANDS: dict[str, tuple[str, Mapping[str, str]]] = {}

#: `tfdist tf-config generate`: tf_config.generate's arguments
GENERATE_FLAGS = {name: "--" + name.replace("_", "-") for name in (
    "chief", "workers", "ps", "evaluator", "dialect", "hosts", "port", "base_port", "job_name", "namespace")}

#: `tfdist jobs ...`: JobSpec.from_file's path, the api's arguments, the backends' options, the spec's overrides
JOBS_FLAGS = {
    "path": "--config", "backend": "--backend", "task": "--task", "namespace": "--namespace",
    "image": "--image", "address": "--ray-address", "placement": "--placement", "shared_job_dir": "--shared-job-dir",
    "trainingInput.pythonModule": "--module-name", "trainingInput.packagePath": "--package-path",
    "trainingInput.jobDir": "--job-dir", "trainingInput.scaleTier": "--scale-tier",
    "trainingInput.region": "--region", "trainingInput.runtimeVersion": "--runtime-version",
    "trainingInput.packageUris": "--packages", "partition": "--partition", "time_limit": "--time-limit",
    "trainingInput.pythonVersion": "--python-version",
    "max_running": "--max-running", "max_log_bytes": "--max-log-bytes", "log_backups": "--log-backups",
}

#: `tfdist local train`: local_train's arguments
LOCAL_TRAIN_FLAGS = {
    "module": "--module-name", "package_path": "--package-path", "job_dir": "--job-dir",
    "workers": "--worker-count", "ps": "--parameter-server-count", "evaluators": "--evaluator-count",
    "timeout": "--timeout",
}

#: `tfdist launch`: launch's arguments
LAUNCH_FLAGS = {name: "--" + name.replace("_", "-") for name in (
    "chief", "workers", "ps", "evaluator", "timeout", "grace_period", "max_restarts", "max_preemptions", "job_dir",
    "isolate", "placement", "preload", "dialect", "partition", "time_limit", "nodes", "max_log_bytes",
    "log_backups")} | {
    "address": "--ray-address", "shared_dirs": "--shared-dir"}

COMMANDS.update({
    "tf_config.generate": ("tfdist tf-config generate", GENERATE_FLAGS),
    "toolkit.jobs.list_jobs": ("tfdist jobs list", JOBS_FLAGS),
    "toolkit.jobs.describe": ("tfdist jobs describe", JOBS_FLAGS),
})

_CALL = re.compile(r"`([\w.]+)\(([^`]*)\)`")
_ASSIGN = re.compile(r"`(\w+)=([^`]*)`")
_BARE_ASSIGN = re.compile(r"(?<![\w`.'\"-])([a-z_]+)=([\w.:/-]*\w)")
_NAME = re.compile(r"`([\w.]+)`")


def _value(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        return ",".join(_value(item) for item in text[1:-1].split(","))
    return text


def _flag_and_value(name: str, value: str, flags: Mapping[str, str]) -> str:
    return f"{flags[name]} {_value(value)}"


def _call(match: re.Match[str]) -> str:
    command = COMMANDS.get(match.group(1))
    if command is None:
        return match.group(0)
    words, flags = command
    args = [a.split("=", 1) for a in match.group(2).split(",") if a.strip()]
    if any(len(a) != 2 or a[0].strip() not in flags for a in args):
        return f"`{words}`" if not args else match.group(0)
    return "`" + " ".join([words, *(_flag_and_value(k.strip(), v, flags) for k, v in args)]) + "`"


def speak_flags(text: str, flags: Mapping[str, str]) -> str:
    """``text`` with the library's Python spelling of arguments turned into flags.

    Example:
        >>> speak_flags("Generate it with `tf_config.generate(ps=1)`.", {})
        'Generate it with `tfdist tf-config generate --ps 1`.'
        >>> speak_flags("or pass `backend='ray'`.", JOBS_FLAGS)
        'or pass `--backend ray`.'
        >>> speak_flags("`chief` is 0 with ps=1. Pass chief=1.", LAUNCH_FLAGS)
        '`--chief` is 0 with --ps 1. Pass --chief 1.'
    """
    text = _CALL.sub(_call, text)
    text = _ASSIGN.sub(lambda m: f"`{_flag_and_value(m.group(1), m.group(2), flags)}`"
                       if m.group(1) in flags else m.group(0), text)
    text = _BARE_ASSIGN.sub(lambda m: _flag_and_value(m.group(1), m.group(2), flags)
                            if m.group(1) in flags else m.group(0), text)
    return _NAME.sub(lambda m: f"`{flags[m.group(1)]}`" if m.group(1) in flags else m.group(0), text)


def _about_a_flag(field: str, message: str, flags: Mapping[str, str]) -> tuple[str, str]:
    """(field, message) in flags, when the field is one; else as written, library calls turned into commands.

    Only a message about a flag has its argument names rewritten: elsewhere ``ps``
    or ``chief`` name TF_CONFIG jobs, not ``--ps`` or ``--chief``.
    """
    if field in flags:
        return flags[field], speak_flags(message, flags)
    return field, speak_flags(message, {})


def problem_text(problem: Problem, flags: Mapping[str, str]) -> str:
    """One problem as ``severity: field: message``, the field and the message in flags."""
    field, message = _about_a_flag(problem.field, problem.message, flags)
    return f"{problem.severity}: {field}: {message}"


def error_text(exc: FieldError, flags: Mapping[str, str]) -> str:
    """The error's message for the terminal: its field(s) named by their flags."""
    if isinstance(exc, ProblemsError):
        errors = [p for p in exc.problems if p.is_error]
        lines = [_about_a_flag(p.field, p.message, flags) for p in errors]
        if len(lines) == 1:
            return f"{exc.title}: {lines[0][0]}: {lines[0][1]}"
        return "\n".join([f"{exc.title} ({len(lines)} errors):", *(f"  - {f}: {m}" for f, m in lines)])
    return _about_a_flag(exc.field, str(exc), flags)[1]
