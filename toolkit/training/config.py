"""The training engine's error and its ``steps_per_execution`` under parameter servers.

The run's numbers are checked in ``toolkit.training.options`` (``FitConfig`` and
the option groups), before TensorFlow builds anything or a cluster connects.
"""
from __future__ import annotations

from tf_config.errors import FieldError

__all__ = ["PS_STEPS_PER_EXECUTION", "TrainingError"]

#: ``steps_per_execution`` chosen under parameter servers when the caller sets none: four loop
#: iterations of ``runners.UNROLL_LIMIT`` straight steps, as fast as the longest executions measured.
PS_STEPS_PER_EXECUTION = 32


class TrainingError(FieldError):
    """Bad input to the training loop; ``.field`` names the offending argument."""
