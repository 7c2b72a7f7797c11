"""The one error type of sharded tables."""
from __future__ import annotations

__all__ = ["ShardingError"]


class ShardingError(ValueError):
    """A sharded table cannot be created, used or restored as asked.

    Attributes:
        field: the argument at fault, e.g. ``"num_shards"`` or ``"checkpoint"``.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)
