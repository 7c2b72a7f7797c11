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
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ._errors import Problem, TFConfigError
from ._model import _EXTRA_KEYS, TFConfig

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
    for cfg, text in zip(configs, _json_each(configs, {}), strict=True):
        quoted = text.replace("'", "'\\''")
        blocks.append(f"# {task_name(cfg)}\nexport TF_CONFIG='{quoted}'\n")
    return "\n".join(blocks)


def _env(configs: list[TFConfig]) -> str:
    texts = _json_each(configs, {"separators": (",", ":")})
    return "\n".join(f"# {task_name(cfg)}\nTF_CONFIG={text}\n" for cfg, text in zip(configs, texts, strict=True))


class _Shared:
    """Each config as a dict whose cluster is a placeholder, and each distinct cluster once.

    Every task's TF_CONFIG repeats the whole cluster; serializing it once per
    cluster and splicing the text in keeps rendering linear in the output's size.
    """

    def __init__(self, configs: list[TFConfig]) -> None:
        salt = uuid.uuid4().hex
        self.clusters: dict[str, dict[str, list[str]]] = {}
        seen: dict[int, str] = {}
        self.docs: list[dict] = []
        self.names = [task_name(cfg) for cfg in configs]
        for cfg in configs:
            token = seen.get(id(cfg.cluster))
            if token is None:
                token = seen[id(cfg.cluster)] = f"tfdist-cluster-{len(seen)}-{salt}"
                self.clusters[token] = {k: list(v) for k, v in cfg.cluster.items()}
            doc: dict[str, Any] = {"cluster": token if self.clusters[token] else {}}
            if cfg.task is not None:
                doc["task"] = cfg.task.to_dict()
            doc.update({k: getattr(cfg, k) for k in _EXTRA_KEYS if getattr(cfg, k) is not None})
            self.docs.append(doc)

    def structure(self) -> dict:
        if len(self.docs) == 1:
            return self.docs[0]
        return {name: doc for name, doc in zip(self.names, self.docs, strict=True)}

    def splice(self, text: str, render: Callable[[str, dict[str, list[str]]], tuple[str, str]]) -> str:
        for token, cluster in self.clusters.items():
            old, new = render(token, cluster)
            text = text.replace(old, new)
        return text


def _json_each(configs: list[TFConfig], options: dict[str, Any]) -> list[str]:
    shared = _Shared(configs)
    texts = {token: json.dumps(cluster, **options) for token, cluster in shared.clusters.items()}
    return [shared.splice(json.dumps(doc, **options), lambda token, _: (json.dumps(token), texts[token]))
            for doc in shared.docs]


def _json(configs: list[TFConfig]) -> str:
    shared = _Shared(configs)
    indent = "  " * (1 if len(configs) == 1 else 2)

    def cluster_text(token: str, cluster: dict[str, list[str]]) -> tuple[str, str]:
        return json.dumps(token), json.dumps(cluster, indent=2).replace("\n", "\n" + indent)

    return shared.splice(json.dumps(shared.structure(), indent=2), cluster_text) + "\n"


def _yaml(configs: list[TFConfig]) -> str:
    import yaml  # imported here: validate and explain never need it

    shared = _Shared(configs)
    indent = "" if len(configs) == 1 else "  "
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's writer: the same text

    def dump(data: object) -> str:
        return yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False)

    def cluster_text(token: str, cluster: dict[str, list[str]]) -> tuple[str, str]:
        block = dump(cluster)
        nested = "".join(f"{indent}  {line}\n" for line in block.splitlines())
        return f"\n{indent}cluster: {token}\n", f"\n{indent}cluster:\n{nested}"

    text = "\n" + dump(shared.structure())
    return shared.splice(text, cluster_text)[1:]


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
