"""The canned estimators' error: bad constructor input or bad data, named by its argument.

A subclass of the engine's ``EstimatorError``, so one ``except EstimatorError``
catches every Estimator argument error, canned or not.
"""
from __future__ import annotations

from toolkit.estimator._construct import EstimatorError

__all__ = ["CannedError"]


class CannedError(EstimatorError):
    """A canned-estimator argument (or what input_fn fed it) is invalid; ``.field`` names the argument."""
