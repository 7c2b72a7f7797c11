"""The canned estimators' one error type: bad constructor input or bad data, named by its argument."""
from __future__ import annotations

__all__ = ["CannedError"]


class CannedError(ValueError):
    """A canned-estimator argument (or what input_fn fed it) is invalid; ``.field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)
