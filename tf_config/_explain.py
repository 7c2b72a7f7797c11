"""A human summary of one TF_CONFIG: who am I, who is chief, what would `auto` pick, what is wrong."""
from __future__ import annotations

import json
from typing import Any

from ._errors import errors_of
from ._model import TFConfig, recommend_strategy
from ._validate import validate

_CUSTOM_ROLE = "a custom job: only code that places ops on it uses it"
_ROLES = {
    "chief": "coordinates training, writes checkpoints and summaries",
    "master": "the TF1/CMLE name for the chief: coordinates, writes checkpoints",
    "worker": "computes training steps",
    "ps": "holds variables for the workers (parameter server)",
    "evaluator": "evaluates checkpoints beside training (not part of the training cluster)",
}


def explain(doc: Any, *, strategy: str | None = None, num_local_gpus: int = 0) -> str:
    """Describe a TF_CONFIG for a person.

    Args:
        doc: a ``TFConfig``, JSON text or a mapping; an invalid one is explained
            as far as possible, then every problem is listed.
        strategy: also check the rules of this strategy.
        num_local_gpus: GPUs on this machine, for the ``auto`` recommendation.

    Example:
        >>> print(explain(TFConfig()).splitlines()[0])
        TF_CONFIG: one-process run (no cluster)
    """
    structural = errors_of(validate(doc))
    problems = validate(doc, strategy=strategy)
    if structural:
        lines = [f"TF_CONFIG is invalid: {len(structural)} error(s); fix them first."]
    else:
        cfg = doc if isinstance(doc, TFConfig) else TFConfig._from_valid_dict(_as_dict(doc))
        lines = _describe(cfg, num_local_gpus)
        name = recommend_strategy(cfg)[0]
        if strategy is not None:
            verdict = "cannot run" if errors_of(problems) else "can run"
            chosen = f"auto ({name})" if strategy == "auto" else strategy
            lines.append(f"  strategy:      this cluster {verdict} {chosen}")
    lines.append("problems:" if problems else "problems: none")
    lines.extend(f"  {p}" for p in problems)
    return "\n".join(lines) + "\n"


def _as_dict(doc: Any) -> dict:
    return json.loads(doc) if isinstance(doc, (str, bytes)) else dict(doc)


def _describe(cfg: TFConfig, num_local_gpus: int) -> list[str]:
    name, reason = recommend_strategy(cfg, num_local_gpus=num_local_gpus)
    if cfg.is_local:
        header = "TF_CONFIG: one-process run (no cluster)"
        counts = "none"
    else:
        header = f"TF_CONFIG: this process is {cfg.task_type}-{cfg.task_index}"
        counts = ", ".join(f"{len(a)} {job}" for job, a in cfg.cluster.items())
    chief = "yes" if cfg.is_chief else (
        f"no (the chief is {cfg.chief_job}-0 at {cfg.chief_address})" if cfg.chief_address else "no"
    )
    return [
        header,
        f"  role:          {cfg.task_type} - {_ROLES.get(cfg.task_type, _CUSTOM_ROLE)}",
        f"  address:       {cfg.address or '-'}",
        f"  is_chief:      {chief}",
        f"  cluster:       {counts}",
        f"  num_workers:   {cfg.num_workers} (workers + chief)",
        f"  num_ps:        {cfg.num_ps}",
        f"  global_id:     {'-' if cfg.global_id is None else cfg.global_id}",
        f"  auto strategy: {name}, because {reason}",
    ]
