"""The one place the Estimator engine reads a private TensorFlow attribute.

``SyncReplicasOptimizer.make_session_run_hook`` returns a hook that keeps its
optimizer in ``_sync_optimizer``; the chief needs that optimizer to hand the
waiting workers their last tokens when training stops (TF1 left them blocked).
``tests/unit/test_estimator_graph.py`` names the symbol, so an upgrade that
removes it fails there first.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["SYNC_HOOK_ATTRIBUTE", "sync_optimizers"]

SYNC_HOOK_ATTRIBUTE = "_sync_optimizer"


def sync_optimizers(hooks: Iterable[Any]) -> list[Any]:
    """The ``SyncReplicasOptimizer`` behind each of ``hooks`` that has one."""
    found = []
    for hook in hooks:
        optimizer = getattr(hook, SYNC_HOOK_ATTRIBUTE, None)
        if optimizer is not None and callable(getattr(optimizer, "get_init_tokens_op", None)):
            found.append(optimizer)
    return found
