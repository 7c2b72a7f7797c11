"""Loaded by Python at start-up in every task ``tfdist launch`` starts (this directory leads its PYTHONPATH).

It lets scripts written as TensorFlow's tutorials write them end cleanly:
once the script imports TensorFlow, ``server.join()`` returns when the chief
says goodbye and a ``ParameterServerStrategy`` built by hand says goodbye at
exit (``strategies._hand_built``). TensorFlow itself is not imported here, so
a task that never uses it pays nothing. The ``sitecustomize`` this one
shadows (e.g. the system Python's) is run after it, as if it came first.
"""
import importlib.util
import os
import sys


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "sitecustomize.py")
        if os.path.dirname(candidate) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_tfdist_shadowed_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _arm() -> None:
    try:
        from strategies._hand_built import install_after_import
    except ImportError:  # an interpreter without tfdist (the task runs another Python): nothing to arm
        return
    install_after_import()


_arm()
_run_shadowed()
