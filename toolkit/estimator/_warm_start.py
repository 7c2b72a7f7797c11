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
        selection, previous = _per_component(settings)
        tf.compat.v1.train.warm_start(settings.ckpt_to_initialize_from, vars_to_warm_start=selection,
                                      var_name_to_vocab_info=settings.var_name_to_vocab_info,
                                      var_name_to_prev_var_name=previous)


def _per_component(settings: WarmStartSettings) -> tuple[Any, Any]:
    """Under a tf.distribute strategy: each selected mirrored variable's components, each read from the
    mirrored variable's name in the checkpoint. (TF's warm start would take a mirrored variable listed beside
    its components for the slices of one partitioned variable, and initialising the mirrored variable itself
    leaves its components' initialisers as they were.) Otherwise the settings as they are."""
    import re

    v1 = tf.compat.v1
    selection, previous = settings.vars_to_warm_start, settings.var_name_to_prev_var_name
    patterns = [selection] if isinstance(selection, str) or selection is None else list(selection)
    if not all(isinstance(p, str) for p in patterns if p is not None):
        return selection, previous
    collection = v1.GraphKeys.TRAINABLE_VARIABLES if isinstance(selection, str) or selection is None \
        else v1.GraphKeys.GLOBAL_VARIABLES
    chosen = [v for v in v1.get_collection(collection) if any(p is None or re.match(p, v.name) for p in patterns)]
    mirrored = [v for v in chosen if any(c is not v for c in getattr(v, "values", ()))]
    if not mirrored:
        return selection, previous
    components = {id(c) for v in mirrored for c in v.values}
    renamed = dict(previous or {})
    expanded: list[Any] = []
    for variable in chosen:
        if id(variable) in components or any(variable is e for e in expanded):
            continue
        if not any(variable is m for m in mirrored):
            expanded.append(variable)
            continue
        base = variable.name.split(":")[0]
        for component in variable.values:
            name = component.name.split(":")[0]
            if name != base:
                renamed[name] = renamed.get(base, base)
            expanded.append(component)
    return expanded, renamed


def export_fallback(settings: WarmStartSettings | None) -> str | None:
    """The checkpoint an export with no trained model reads: the warm-start one (TF's rule), or None."""
    if settings is None:
        return None
    path = settings.ckpt_to_initialize_from
    return tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
