"""What ``fit`` returns: a Keras-like history plus where the artifacts went."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras

__all__ = ["History"]


@dataclasses.dataclass
class History:
    """Per-epoch metrics and the run's artifacts.

    Attributes:
        history: ``{"loss": [...], "accuracy": [...], "val_loss": [...]}``, one
            value per epoch run by this call (for the evaluator: per checkpoint).
        epoch: the epoch indices (for the evaluator: the global steps) of those values.
        rates: ``steps_per_sec`` and ``examples_per_sec`` of each epoch.
        model: the trained Keras model (None in tasks that only serve).
        global_step: the global step at the end.
        model_dir: where checkpoints and summaries live.
        exports: ``{"keras": path, "saved_model": path}`` on the chief.
        role: ``chief``, ``worker``, ``evaluator`` (what this task did).
        stopped_early: a callback ended training before the last epoch.
        sync_stats: with ``FitOptions.sync``, on the chief: ``replicas_to_aggregate``,
            ``contributions`` (worker steps scheduled by this call), ``updates``
            (global steps they made), ``stale`` (dropped) and ``pending``
            (accumulated, not yet applied); ``contributions ==
            replicas_to_aggregate * updates + stale + pending``. Empty otherwise.
    """

    history: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    epoch: list[int] = dataclasses.field(default_factory=list)
    rates: list[dict[str, float]] = dataclasses.field(default_factory=list)
    model: keras.Model | None = None
    global_step: int = 0
    model_dir: str | None = None
    exports: dict[str, str] = dataclasses.field(default_factory=dict)
    role: str = "chief"
    stopped_early: bool = False
    sync_stats: dict[str, int] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> list[float]:
        return self.history[name]

    def final(self, name: str) -> float:
        """The last value of a metric, e.g. ``history.final("val_accuracy")``."""
        return self.history[name][-1]
