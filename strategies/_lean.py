"""Keep a task from importing what it never runs.

``import tensorflow`` (2.21) imports all of Keras 3 (TensorFlow loads the Keras
optimizers eagerly to register them), and Keras imports its optional companions
when they are installed: scikit-learn (``keras.wrappers``, and SciPy with it),
matplotlib (``keras.visualization``), IPython (the notebook file editor), pandas
(DataFrame input) and Pillow (image files), costing memory and start-up time
in every task (``benchmarks/bench_resources.py`` measures it).

Two kinds of task leave them out:

- A parameter-server ps or worker runs only its ``tf.distribute.Server``: the chief
  sends it graphs of TensorFlow's C++ kernels, so no Keras Python ever runs there
  (``SERVER_UNUSED_MODULES``, applied by ``run_role``).
- A trainer that we wrote and that uses none of the companions, such as the demo
  (``TRAINER_UNUSED_MODULES``). A user's own script is never restricted.

A finder first in ``sys.meta_path`` makes those imports raise
``ModuleNotFoundError`` (and ``importlib.util.find_spec`` answer with no
origin), which TensorFlow's eager Keras import and Keras' optional
imports both catch. The packages stay absent from ``sys.modules``, so code that
asks "is pandas loaded?" there gets a true answer. It only helps before
TensorFlow is imported, and the process can no longer import those packages, so
it is applied only where nothing later needs them.
"""
from __future__ import annotations

import importlib.abc
import logging
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["SERVER_UNUSED_MODULES", "TRAINER_UNUSED_MODULES", "skip_imports"]

logger = logging.getLogger(__name__)

#: Keras' optional companions: imported by Keras when installed, used by no toolkit trainer.
TRAINER_UNUSED_MODULES = ("sklearn", "scipy", "matplotlib", "IPython", "pandas", "PIL")

#: Packages a serving task never runs (it executes graphs the chief sends).
SERVER_UNUSED_MODULES = ("keras", "tensorflow_datasets", *TRAINER_UNUSED_MODULES)


class _Skipped(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes the imports of ``names`` (and their submodules) raise ``ModuleNotFoundError``.

    The spec it finds has no origin, which is how TensorFlow's own probe
    (``importlib.util.find_spec("keras")``) tells that a package is not there.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        return ModuleSpec(fullname, self) if fullname.partition(".")[0] in self.names else None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        raise ModuleNotFoundError(f"No module named {spec.name!r} (left out of this task: it never uses it)",
                                  name=spec.name)

    def exec_module(self, module: ModuleType) -> None:  # never reached: create_module raises
        raise ModuleNotFoundError(f"No module named {module.__name__!r}", name=module.__name__)


def skip_imports(modules: Sequence[str]) -> bool:
    """Makes ``modules`` unimportable in this process, if TensorFlow is not imported yet.

    Returns:
        True if applied; False when TensorFlow (or one of ``modules``) is
        already imported, in which case nothing changes.
    """
    loaded = [name for name in ("tensorflow", *modules) if name in sys.modules]
    if loaded:
        logger.debug("running with the full imports: %s already imported", ", ".join(loaded))
        return False
    sys.meta_path.insert(0, _Skipped(modules))
    logger.debug("running without %s", ", ".join(modules))
    return True
