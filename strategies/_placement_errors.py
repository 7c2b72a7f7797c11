"""The one error type of device maps: the problem-list error of ``tf_config.errors``."""
from __future__ import annotations

from tf_config.errors import ProblemsError

__all__ = ["DeviceMapError"]


class DeviceMapError(ProblemsError):
    """A device map cannot be applied, or was not honoured; its attributes are ``ProblemsError``'s."""

    title = "device map cannot be honoured"
