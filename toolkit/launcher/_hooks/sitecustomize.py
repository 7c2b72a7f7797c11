"""Loaded by Python at start-up in every task ``tfdist launch`` starts (this directory leads its PYTHONPATH).

It lets scripts written as TensorFlow's tutorials write them end cleanly:
once the script has imported TensorFlow, ``server.join()`` returns when the
chief says goodbye and a ``ParameterServerStrategy`` built by hand says
goodbye at exit (``strategies._hand_built.install``). In a job with a
``--job-dir`` (``TFDIST_USER_JOB_DIR``), a trainer that creates that dir again
succeeds, as on CMLE (``_job_dir_exists_ok``), and a task of a cluster that never
reads TF_CONFIG leaves a note for the job (``_note_unread_tf_config``). Until then only the
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


def _note_unread_tf_config(task_dir):
    """In a task of a cluster: leaves ``<task dir>/tf_config.unread`` at exit if TF_CONFIG was never read.

    A trainer with no distribution strategy (a Keras ``model.fit`` as written
    for one machine) never reads TF_CONFIG, so every task, the ps included,
    trains a model of its own. The job's supervisor finds the files and says so
    once. Reading is noticed at ``os.environ`` (``os.environ[...]``, ``.get``,
    ``in``, ``os.getenv``), where TensorFlow's cluster resolvers read it.
    """
    import atexit
    import json

    try:
        cluster = json.loads(os.environ["TF_CONFIG"]).get("cluster") or {}
        tasks = sum(len(addresses) for addresses in cluster.values())
    except (KeyError, ValueError, AttributeError, TypeError):
        return  # no cluster to speak of; the trainer's own reading will say what is wrong
    if tasks < 2:
        return
    note = os.path.join(task_dir, "tf_config.unread")
    if os.path.exists(note):  # an earlier start of this task's; this one may read it
        os.remove(note)
    environ_class = type(os.environ)
    read = []

    class _NotingEnviron(environ_class):
        def __getitem__(self, key):
            if key == "TF_CONFIG" and not read:
                read.append(True)
            return environ_class.__getitem__(self, key)

    os.environ.__class__ = _NotingEnviron

    def leave_note():
        if not read and os.path.isdir(task_dir):
            with open(note, "w") as fh:
                fh.write("this task never read TF_CONFIG\n")

    atexit.register(leave_note)


sys.meta_path.insert(0, _AfterImport())
if os.environ.get("TFDIST_TASK_DIR") and os.environ.get("TF_CONFIG"):
    _note_unread_tf_config(os.environ["TFDIST_TASK_DIR"])
if os.environ.get("TFDIST_USER_JOB_DIR"):
    _job_dir_exists_ok(os.environ["TFDIST_USER_JOB_DIR"])
_run_shadowed()
