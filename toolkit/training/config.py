"""The training engine's error.

The run's numbers are checked in ``toolkit.training.options`` (``FitConfig`` and
the option groups), before TensorFlow builds anything or a cluster connects.
"""
from __future__ import annotations

from tf_config.errors import FieldError

__all__ = ["TrainingError"]


class TrainingError(FieldError):
    """Bad input to the training loop; ``.field`` names the offending argument."""
