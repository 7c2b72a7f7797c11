"""Loaded by Python at start-up in every task ``tfdist launch`` starts (this directory leads its PYTHONPATH).

It lets scripts written as TensorFlow's tutorials write them end cleanly:
once the script has imported TensorFlow, ``server.join()`` returns when the
chief says goodbye and a ``ParameterServerStrategy`` built by hand says
goodbye at exit (``strategies._hand_built.install``). Until then only the
standard library is used, so a task that never imports TensorFlow pays
nothing. The ``sitecustomize`` this one shadows (e.g. the system Python's) is
run after it, as if it came first.
"""
import importlib.abc
import importlib.util
import os
import sys


class _Loader(importlib.abc.Loader):
    """TensorFlow's own loader, then tfdist's ``install()``."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            from strategies._hand_built import install
        except ImportError:  # an interpreter without tfdist (the task runs another Python): nothing to arm
            return
        install()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Waits for ``import tensorflow`` without importing it."""

    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def _trusted(directory, path):
    """A directory and file only this user (or root) can write: another user's planted sitecustomize.py (in a
    1777 dir such as /tmp, put on sys.path as a package's parent) is never run."""
    for name in (directory, path):
        info = os.stat(name)
        if info.st_uid not in (os.getuid(), 0) or info.st_mode & 0o002 or (
                info.st_mode & 0o020 and info.st_gid != os.getgid()):
            return False
    return True


def _run_shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "sitecustomize.py")
        if os.path.dirname(candidate) != here and os.path.isfile(candidate):
            if not _trusted(os.path.dirname(candidate), candidate):
                sys.stderr.write(f"tfdist: not running {candidate}: another user owns it or can write its "
                                 "directory\n")
                return
            spec = importlib.util.spec_from_file_location("_tfdist_shadowed_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


sys.meta_path.insert(0, _AfterImport())
_run_shadowed()
