"""Exports of the trained model: a ``.keras`` file and a TensorFlow SavedModel.

The export is built from a fresh copy of the model made outside any strategy
(``model_fn()`` plus the trained weights), so it holds ordinary variables
whichever strategy trained it: a SavedModel traced over parameter-server or
mirrored variables would not load on a single machine. Each artifact is written
under a temporary name and renamed into place, so a reader sees the old export
or the new one, never half of one.
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os
import shutil
import tempfile
from collections.abc import Callable

import keras

from toolkit.training.extensions import copy_export_state

__all__ = ["export_model", "release_memory"]

logger = logging.getLogger(__name__)


def _replace_dir(source: str, target: str) -> None:
    old = None
    if os.path.exists(target):
        old = f"{target}.old-{os.getpid()}"
        os.replace(target, old)
    os.replace(source, target)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def release_memory() -> None:
    """Collects Python's garbage and hands the C allocator's free pages back to the system.

    ``gc.collect()`` frees dropped traced functions (their graphs hold reference
    cycles); glibc keeps freed memory in its arenas, so ``malloc_trim(0)`` returns
    it. A no-op for the allocator
    where the C library has no ``malloc_trim`` (not glibc).
    """
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the symbols this process has loaded
    if trim is not None:
        trim(0)


def _copy_optimizer(trained: keras.Model, clean: keras.Model) -> None:
    """Gives the compiled copy the trained optimizer's state, so ``model.keras`` loads ready to train on."""
    optimizer, source = getattr(clean, "optimizer", None), getattr(trained, "optimizer", None)
    if optimizer is None or source is None:
        return
    optimizer.build(clean.trainable_variables)
    pairs = list(zip(optimizer.variables, source.variables, strict=False))
    if len(optimizer.variables) == len(source.variables) and all(a.shape == b.shape for a, b in pairs):
        for mine, theirs in pairs:
            mine.assign(theirs.numpy())


def export_model(model: keras.Model, model_fn: Callable[[], keras.Model], directory: str) -> dict[str, str]:
    """Writes ``<directory>/model.keras`` and ``<directory>/saved_model``.

    Returns:
        ``{"keras": path, "saved_model": path}``.
    """
    os.makedirs(directory, exist_ok=True)
    clean = model_fn()
    clean.set_weights(model.get_weights())
    copy_export_state(model, clean)  # e.g. sharded embedding tables, which are not weights
    _copy_optimizer(model, clean)
    keras_path = os.path.join(directory, "model.keras")
    fd, tmp_file = tempfile.mkstemp(suffix=".keras", dir=directory)
    os.close(fd)
    clean.save(tmp_file)
    os.replace(tmp_file, keras_path)
    saved_model = os.path.join(directory, "saved_model")
    tmp_dir = tempfile.mkdtemp(prefix=".saved_model-", dir=directory)
    clean.export(tmp_dir, format="tf_saved_model", verbose=False)
    _replace_dir(tmp_dir, saved_model)
    logger.info("exported %s and %s", keras_path, saved_model)
    return {"keras": keras_path, "saved_model": saved_model}
