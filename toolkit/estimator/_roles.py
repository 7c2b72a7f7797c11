"""Which part each TF_CONFIG task plays in between-graph training, and the ps role itself."""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["role_of", "serve_if_ps"]


def role_of(config: Any) -> str:
    """``local``, ``ps``, ``evaluator``, ``chief`` or ``worker`` for a ``RunConfig``."""
    cfg = config.tf_config
    if cfg.is_local:
        return "local"
    if cfg.is_evaluator:
        return "evaluator"
    if cfg.is_ps:
        return "ps"
    return "chief" if config.is_chief else "worker"


def serve_if_ps(config: Any) -> None:
    """In a ps task: serve the job's variables until the chief says goodbye, then exit with its code."""
    if role_of(config) != "ps":
        return
    from strategies import ServeOptions, serve

    options = ServeOptions.from_env(chief_start_timeout=config.chief_start_timeout,
                                    chief_lost_after=config.chief_lost_after)
    sys.exit(serve(config.tf_config, options=options, graph_only=True))  # TF1 graph steps only
