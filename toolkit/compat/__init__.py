"""Compatibility modules for code written for older TensorFlow: ``toolkit.compat.v1``."""
__all__ = ["v1"]
