"""TF1's ``tf`` namespace on TF 2.21, in one import line.

``import toolkit.compat.v1 as tf`` gives ``tf.compat.v1`` (sessions,
``tf.train``, ``tf.feature_column``, ``tf.losses``, ``tf.metrics``,
``tf.placeholder``, ...) plus what TF 2.21 no longer has:

* ``tf.estimator``: ``toolkit.estimator``, the graph-mode Estimator engine,
  with the canned estimators as ``tf.compat.v1.estimator`` had them (TF1's
  defaults, from ``toolkit.estimator.canned.v1``);
* ``tf.layers``: TF1's layers (``dense``, ``conv2d``, ``max_pooling2d``,
  ``dropout``, ``batch_normalization``, ``flatten`` and their classes), served
  by ``tf_keras``' legacy v1 layers (the ``estimator`` extra);
* ``tf.keras``: Keras 2 (``tf_keras``), which builds in TF1 graphs;
* ``tf.nn.embedding_lookup`` on a table partitioned over the ps reads each
  distinct id of a batch once (``toolkit.compat._v1_nn``): the same values
  and updates, about half the rows moved on click-through ids.

Nothing is imported from ``tf_keras`` until ``tf.layers`` or ``tf.keras`` is
used.

**Graph mode, as TF1 had it.** Imported at the top of a program's main
script (the module Python runs, as TF1 scripts import ``tensorflow``), this
module switches the process to graph mode (``disable_eager_execution``), so
``tf.placeholder``, ``tf.Variable`` in the default graph and
``tf.device(tf.train.replica_device_setter(...))`` work as in TF1. Imported
anywhere else (inside a function, from a library module or a test), it leaves
eager execution as it is: the graph-mode Estimator builds its own
``tf.Graph`` and needs no switch, and Keras 3 code in the same process keeps
eager. Keras 3's ``fit`` and optimizers need eager, so a graph-mode program
trains with ``tf.train`` optimizers (on ``tf.layers``, ``tf.keras`` = Keras 2, or
Keras 3 layers); calling Keras 3's ``fit``/``evaluate``/``predict`` or an
optimizer's ``apply_gradients`` there raises an error that says so
(``toolkit.compat._v1_keras3``).

Example:
    >>> import toolkit.compat.v1 as tf        # was: import tensorflow as tf
    >>> tf.estimator.ModeKeys.TRAIN
    'train'
"""
from __future__ import annotations

import importlib
import sys
from types import FrameType
from typing import Any

import tensorflow as _tf

_V1 = _tf.compat.v1
_OURS = {
    "estimator": lambda: importlib.import_module("toolkit.compat._v1_estimator"),
    "layers": lambda: importlib.import_module("toolkit._compat.tf_keras").legacy_layers(),
    "keras": lambda: importlib.import_module("toolkit.compat._v1_keras").keras(),
    "train": lambda: importlib.import_module("toolkit.compat._v1_server").namespace("train"),
    "distribute": lambda: importlib.import_module("toolkit.compat._v1_server").namespace("distribute"),
    "nn": lambda: importlib.import_module("toolkit.compat._v1_nn").namespace(),
}

__all__ = sorted(set(dir(_V1)) | set(_OURS))


def _importer(frame: FrameType | None) -> FrameType | None:
    """The frame whose import statement loaded this module (importlib's own frames skipped)."""
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_globals.get("__name__") == __name__):
        frame = frame.f_back
    return frame


def imported_by_main_script(frame: FrameType | None) -> bool:
    """Whether ``frame`` is the top level of the program's main module, where TF1 scripts import TensorFlow."""
    return frame is not None and frame.f_globals.get("__name__") == "__main__" and frame.f_code.co_name == "<module>"


if imported_by_main_script(_importer(sys._getframe())):
    _V1.disable_eager_execution()
    importlib.import_module("toolkit.compat._v1_keras3").guard_keras3()  # Keras 3 cannot train in graph mode


def __getattr__(name: str) -> Any:
    loader = _OURS.get(name)
    value = loader() if loader is not None else getattr(_V1, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
