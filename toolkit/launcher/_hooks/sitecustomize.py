"""Loaded by Python at start-up in every task ``tfdist launch`` starts (this directory leads its PYTHONPATH).

It lets scripts written as TensorFlow's tutorials write them end cleanly:
once the script has imported TensorFlow, ``server.join()`` returns when the
chief says goodbye and a ``ParameterServerStrategy`` built by hand says
goodbye at exit (``strategies._hand_built.install``). In a job with a
``--job-dir`` (``TFDIST_USER_JOB_DIR``), a trainer that creates that dir again
succeeds, as on CMLE (``_job_dir_exists_ok``). Until then only the
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


def _run_shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "sitecustomize.py")
        if os.path.dirname(candidate) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_tfdist_shadowed_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _job_dir_exists_ok(job_dir):
    """Creating the job's shared ``--job-dir`` again succeeds, as it does on CMLE.

    There each task is its own machine and the job dir a bucket path, so a
    trainer's ``os.makedirs(job_dir)`` (census' Keras sample) never finds it
    there. Here the tasks share one disk and the job creates the dir before they
    start: ``os.mkdir`` (under ``os.makedirs`` and ``Path.mkdir``) of that one
    directory, when it exists, returns as if it had made it. Every other path is
    untouched.
    """
    target = os.path.realpath(job_dir)
    mkdir = os.mkdir

    def mkdir_job_dir(path, mode=0o777, *, dir_fd=None):
        try:
            mkdir(path, mode, dir_fd=dir_fd)
        except FileExistsError:
            if dir_fd is not None or os.path.realpath(path) != target or not os.path.isdir(path):
                raise

    os.mkdir = mkdir_job_dir


sys.meta_path.insert(0, _AfterImport())
if os.environ.get("TFDIST_USER_JOB_DIR"):
    _job_dir_exists_ok(os.environ["TFDIST_USER_JOB_DIR"])
_run_shadowed()
