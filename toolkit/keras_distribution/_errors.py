"""The one error ``keras.distribution`` on TensorFlow raises for input it cannot honour."""
from __future__ import annotations

from tf_config.errors import FieldError

__all__ = ["KerasDistributionError"]


class KerasDistributionError(FieldError):
    """A mesh, layout, cluster or optimizer tfdist will not run as asked; ``.field`` names it."""
