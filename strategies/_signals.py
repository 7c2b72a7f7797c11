"""Where the serve/goodbye protocol's signals land, and how a task reads them safely.

A signal (the chief's hello and goodbye, a worker's "done") is a small file
that the sender writes *inside the receiving task's process*, with a
``tf.io.write_file`` op run on that task's device, so the signal goes through
the cluster itself and works across machines. The files live in a private
directory of the job's user: ``TFDIST_SIGNAL_DIR`` if set (``tfdist launch``
sets it to a new directory with a random name per job, so no other user can
create it first), else ``$XDG_RUNTIME_DIR/tfdist-signals`` when that runtime
directory is this user's alone, else ``<temp dir>/tfdist-<uid>`` (sender and
receiver compute the same path, as long as they agree on those variables and
run as the same user; another user who creates that last one first makes the
job fail with an error naming it, so set ``TFDIST_SIGNAL_DIR`` where that
matters). The receiver
creates it with mode 0700 and refuses one that another user owns, that others
can read or write, or that is a symlink, so no other local user can list the
files, plant one, or redirect a write elsewhere with a symlink. A file is read
without following symlinks and acted on only when it is a regular file owned
by the job's user; anything else is removed with a warning. The names carry
the cluster token (a hash of the cluster's addresses and the job's nonce), so
two jobs never read each other's signals.
"""
from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence

from strategies._cluster import cluster_token
from strategies._errors import StrategyError

__all__ = ["ENV_SIGNAL_DIR", "ensure_private_dir", "signal_dir", "signal_path", "take_signal"]

logger = logging.getLogger(__name__)

ENV_SIGNAL_DIR = "TFDIST_SIGNAL_DIR"
_MAX_SIGNAL_BYTES = 64


def signal_dir(environ: Mapping[str, str] | None = None) -> str:
    """The private directory the signals of this user's jobs land in (not created here)."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_SIGNAL_DIR):
        return environ[ENV_SIGNAL_DIR]
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and _private_to_me(runtime):
        return os.path.join(runtime, "tfdist-signals")
    return os.path.join(tempfile.gettempdir(), f"tfdist-{os.getuid()}")


def _private_to_me(path: str) -> bool:
    """``path`` is a real directory of this user that no one else can enter (a systemd runtime directory)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def signal_path(cluster: Mapping[str, Sequence[str]], job: str, index: int, kind: str) -> str:
    """Where signal ``kind`` (``exit``, ``hello``, ``done``) for task ``job:index`` lands, on that task's machine."""
    return os.path.join(signal_dir(), f"{cluster_token(cluster)}-{job}-{index}.{kind}")


def ensure_private_dir() -> str:
    """Creates the signal directory (mode 0700) or checks that the existing one is this user's alone.

    A directory of this user that others may only read (a signal that arrived
    before the server looked: TensorFlow's write creates it 755) is made 0700.

    Raises:
        StrategyError: the path is a symlink or not a directory, another user
            owns it, or other users may write to it.
    """
    path = signal_dir()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (or is a symlink)"
    elif info.st_uid != os.getuid():
        problem = f"belongs to uid {info.st_uid}, not to this job's user (uid {os.getuid()})"
    elif info.st_mode & 0o022:
        problem = f"has mode {stat.S_IMODE(info.st_mode):o}, so other users may write to it"
    elif info.st_mode & 0o077:  # created by a signal that came first (TensorFlow's write makes it 755)
        os.chmod(path, 0o700)
    if problem is not None:
        raise StrategyError(
            f"the shutdown signal directory {path} {problem}; a job's signals must be private to its user. "
            f"Remove it (it is recreated with mode 700), or point {ENV_SIGNAL_DIR} at a private directory.",
            field=ENV_SIGNAL_DIR)
    return path


def take_signal(path: str) -> str | None:
    """The text of signal file ``path``, removing it; None if there is none (or it is not to be trusted).

    The file is opened without following a symlink and believed only if it is
    a regular file owned by this user; any other file in its place is removed
    and reported, never acted on.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink planted in its place
        logger.warning("ignored the signal file %s (%s); removed it", path, exc.strerror)
        _remove(path)
        return None
    try:
        info = os.fstat(fd)
        trusted = stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
        text = os.read(fd, _MAX_SIGNAL_BYTES).decode("utf-8", errors="replace") if trusted else None
    finally:
        os.close(fd)
    _remove(path)
    if text is None:
        logger.warning("ignored the signal file %s: not a regular file owned by uid %d; removed it",
                       path, os.getuid())
    return text


def _remove(path: str) -> bool:
    """Removes ``path`` if it exists; True if it did."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return False
    except OSError as exc:  # e.g. a directory in its place
        logger.warning("could not remove %s (%s)", path, exc.strerror)
        return False
    return True


def clear_signals(paths: Sequence[str]) -> None:
    """Removes signal files an earlier job on the same addresses left behind."""
    for path in paths:
        if _remove(path):
            logger.info("removed a signal file left by an earlier job on the same ports: %s", path)
