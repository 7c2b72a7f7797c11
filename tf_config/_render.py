"""Turn generated TF_CONFIGs into text people paste or files tools read, and back.

Formats (named writers in ``_WRITERS``):
  export  ``export TF_CONFIG='...'`` preceded by a ``# chief-0`` comment: paste into a shell.
  env     ``TF_CONFIG=...`` (compact JSON, no spaces, no quotes): docker ``--env-file``, dotenv.
  json    one config: the TF_CONFIG itself; several: an object keyed by task name.
  yaml    the same structure as json, in YAML.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from ._errors import Problem, TFConfigError
from ._model import TFConfig

EXTENSIONS = {"export": "sh", "env": "env", "json": "json", "yaml": "yaml"}
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?TF_CONFIG=(.*?)\s*$", re.MULTILINE)


def task_name(cfg: TFConfig) -> str:
    """``chief-0``-style name of the task a config belongs to (``local`` without a task)."""
    return str(cfg.task) if cfg.task is not None else "local"


def file_name(cfg: TFConfig, fmt: str) -> str:
    """``<type>-<index>.<ext>``: the file ``--output-dir`` writes for this task."""
    _check_format(fmt)
    return f"{task_name(cfg)}.{EXTENSIONS[fmt]}"


def render(configs: TFConfig | Iterable[TFConfig], fmt: str = "export") -> str:
    """Text for one or several configs in ``fmt`` (export, env, json or yaml).

    Example:
        >>> from tf_config import generate
        >>> print(render(generate(chief=1, workers=0, ps=0, base_port=2222)))
        # chief-0
        export TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:2222"]}, "task": {"type": "chief", "index": 0}}'
        <BLANKLINE>
    """
    _check_format(fmt)
    configs = [configs] if isinstance(configs, TFConfig) else list(configs)
    return _WRITERS[fmt](configs)


def _export(configs: list[TFConfig]) -> str:
    blocks = []
    for cfg in configs:
        quoted = cfg.to_json().replace("'", "'\\''")
        blocks.append(f"# {task_name(cfg)}\nexport TF_CONFIG='{quoted}'\n")
    return "\n".join(blocks)


def _env(configs: list[TFConfig]) -> str:
    return "\n".join(
        f"# {task_name(cfg)}\nTF_CONFIG={json.dumps(cfg.to_dict(), separators=(',', ':'))}\n"
        for cfg in configs
    )


def _structure(configs: list[TFConfig]) -> dict:
    if len(configs) == 1:
        return configs[0].to_dict()
    return {task_name(cfg): cfg.to_dict() for cfg in configs}


def _json(configs: list[TFConfig]) -> str:
    return json.dumps(_structure(configs), indent=2) + "\n"


def _yaml(configs: list[TFConfig]) -> str:
    import yaml  # imported here: validate and explain never need it

    return yaml.safe_dump(_structure(configs), sort_keys=False, default_flow_style=False)


_WRITERS: dict[str, Callable[[list[TFConfig]], str]] = {
    "export": _export, "env": _env, "json": _json, "yaml": _yaml,
}
FORMATS = tuple(_WRITERS)


def _check_format(fmt: str) -> None:
    if fmt not in _WRITERS:
        raise TFConfigError([Problem(
            "error", "format", f"`format` is {fmt!r}; expected one of {', '.join(_WRITERS)}. Pick one of them.",
        )])


def read_rendered(text: str, *, yaml_file: bool = False) -> str | dict:
    """Recover one TF_CONFIG from what ``render`` wrote for a single task.

    Accepts bare JSON, an ``export TF_CONFIG='...'`` or ``TF_CONFIG=...`` line, or
    (``yaml_file=True``) YAML. Anything else is returned as-is, so the validator
    reports it as the JSON it is not.
    """
    if yaml_file:
        from ._yaml import YAMLInputError, safe_load

        try:
            return safe_load(text)
        except YAMLInputError as exc:
            raise TFConfigError([Problem(
                "error", "TF_CONFIG", f"the file is not valid YAML ({exc}) Fix the YAML or give JSON.",
            )]) from None
    if text.lstrip().startswith(("{", "[")):
        return text
    match = _ASSIGNMENT.search(text)
    if match is None:
        return text
    value = match.group(1)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1].replace("'\\''", "'") if value[0] == "'" else value[1:-1]
    return value
