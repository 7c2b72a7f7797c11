"""Warm starting, as ``tf.estimator`` did: ``WarmStartSettings`` and where a fresh ``model_dir`` starts from.

With no checkpoint of its own in ``model_dir``, an Estimator given
``warm_start_from`` initialises the listed variables from that checkpoint when
it trains, and also when it evaluates or predicts (TF's ``_maybe_warm_start``
after ``model_fn``); an export then reads the warm-start checkpoint itself (so
``model_to_estimator``'s Estimator exports the Keras weights before any training).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

__all__ = ["WarmStartSettings", "export_fallback", "warm_start_if_new"]


@dataclasses.dataclass(frozen=True)
class WarmStartSettings:
    """``tf.estimator.WarmStartSettings``: which variables start from another checkpoint."""

    ckpt_to_initialize_from: str
    vars_to_warm_start: Any = ".*"
    var_name_to_vocab_info: Mapping[str, Any] | None = None
    var_name_to_prev_var_name: Mapping[str, str] | None = None


def warm_start_if_new(settings: WarmStartSettings | None, model_dir: str) -> None:
    """In the default graph, after model_fn: the warm start, when ``model_dir`` has no checkpoint yet."""
    if settings is not None and tf.train.latest_checkpoint(model_dir) is None:
        tf.compat.v1.train.warm_start(settings.ckpt_to_initialize_from,
                                      vars_to_warm_start=settings.vars_to_warm_start,
                                      var_name_to_vocab_info=settings.var_name_to_vocab_info,
                                      var_name_to_prev_var_name=settings.var_name_to_prev_var_name)


def export_fallback(settings: WarmStartSettings | None) -> str | None:
    """The checkpoint an export with no trained model reads: the warm-start one (TF's rule), or None."""
    if settings is None:
        return None
    path = settings.ckpt_to_initialize_from
    return tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
