"""Directories and files another local user cannot have planted: git's "dubious ownership" check, for tfdist.

A job writes logs, ``cluster.json`` and results into directories it may not
have created (``--job-dir``, ``$TFDIST_HOME``, a trial's directory), and runs
code from directories it did not write (a package's parent, where Python also
finds ``sitecustomize.py``). On a shared machine another user can create such
a directory first, fill it with symlinks to the victim's files or with a
planted module, and wait. So before use, a directory must belong to this user
(or, for code, to root) and no other user may write to it; anything else is
refused with one line naming the path, its owner and mode, and the fix, as
git does for a repository of dubious ownership and ssh for a key file.

Files tfdist creates in such a directory are opened with ``O_NOFOLLOW`` (a
symlink in their place is an error, not a redirect), or written to a new
temporary file and renamed over the name.
"""
from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

__all__ = ["ENV_SAFE_DIRECTORIES", "UnsafePathError", "check_code_dir", "check_owned_dir", "open_append",
           "open_regular", "owned_dir", "read_regular", "write_new"]

#: directories (``os.pathsep``-separated; ``*``: all) whose owner is trusted though it is another user, as git's
#: ``safe.directory``
ENV_SAFE_DIRECTORIES = "TFDIST_SAFE_DIRECTORIES"


class UnsafePathError(ValueError):
    """A directory or file another local user owns, can write, or swapped for a symlink.

    Attributes:
        path: the path refused.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str]) -> None:
        super().__init__(message)
        self.path = str(path)


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _problem(info: os.stat_result, *, owners: tuple[int, ...]) -> str | None:
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid not in owners:
        return f"belongs to {_user(info.st_uid)}, mode {mode:04o}, not to you ({_user(os.getuid())})"
    if mode & 0o002:
        return f"can be written by every user (mode {mode:04o})"
    if mode & 0o020 and info.st_gid != os.getgid():
        return f"can be written by group {info.st_gid}'s members (mode {mode:04o})"
    return None


def _safe_directories(environ: Mapping[str, str] | None = None) -> list[str]:
    """``$TFDIST_SAFE_DIRECTORIES``'s entries: the one place it is read."""
    value = (os.environ if environ is None else environ).get(ENV_SAFE_DIRECTORIES, "")
    return [entry for entry in value.split(os.pathsep) if entry]


def _trusted(path: str | os.PathLike[str]) -> bool:
    """Whether the user named ``path`` in ``$TFDIST_SAFE_DIRECTORIES``: its owner is trusted, whoever it is."""
    entries = _safe_directories()
    real = os.path.realpath(path)
    return "*" in entries or any(os.path.realpath(os.path.expanduser(e)) == real for e in entries)


def _check_parent(path: Path, *, what: str) -> None:
    """Refuses a ``path`` whose parent another user could rename it out of (and put theirs in its place).

    The parent must belong to this user or root (``/tmp``, ``/home``) unless it is in
    ``$TFDIST_SAFE_DIRECTORIES``, and others may write it only under the sticky bit (``/tmp``'s 1777).
    """
    parent = path.parent
    pinfo = os.stat(parent)
    mode = stat.S_IMODE(pinfo.st_mode)
    if pinfo.st_mode & 0o002 and not pinfo.st_mode & stat.S_ISVTX:
        raise UnsafePathError(f"refusing {what} {path}: its parent {parent} can be written by every user "
                              f"(mode {mode:04o}) without the sticky bit, so another user "
                              "could swap the directory. Fix: use a directory under one only you can write.",
                              path=path)
    if pinfo.st_uid not in (os.getuid(), 0) and not _trusted(parent):
        raise UnsafePathError(f"refusing {what} {path}: its parent {parent} belongs to {_user(pinfo.st_uid)}, mode "
                              f"{mode:04o}, not to you ({_user(os.getuid())}){' or root' if os.getuid() else ''}, "
                              "so that user could rename "
                              f"{path.name} away and put a directory of theirs in its place. Fix: use a directory "
                              f"under one of your own, or, if you trust {_user(pinfo.st_uid)}, name the parent in "
                              f"{ENV_SAFE_DIRECTORIES} (export {ENV_SAFE_DIRECTORIES}={parent}).", path=path)


def check_owned_dir(path: str | os.PathLike[str], *, what: str, fix: str | None = None,
                    parent: bool = True) -> Path:
    """``path`` if it is a directory (not a symlink) of this user that no other user can write, in a parent
    (``parent``) no other user controls; else raises. A directory named in ``$TFDIST_SAFE_DIRECTORIES`` may
    belong to another user (git's ``safe.directory``); no directory may be writable by others.

    Raises:
        UnsafePathError: one line naming ``what``, the path, its owner and mode, and the fix.
        FileNotFoundError: ``path`` does not exist.
    """
    info = os.lstat(path)
    owners = (os.getuid(), info.st_uid) if _trusted(path) and stat.S_ISDIR(info.st_mode) else (os.getuid(),)
    problem = _problem(info, owners=owners)
    if problem is None and parent:
        _check_parent(Path(path), what=what)
    if problem is not None:
        hint = fix or f"remove it, or use a directory of your own (mkdir -m 700 {path})"
        raise UnsafePathError(f"refusing {what} {path}: it {problem}, so another user could plant files or "
                              f"symlinks in it. Fix: {hint}.", path=path)
    return Path(path)


def check_code_dir(path: str | os.PathLike[str], *, what: str) -> Path:
    """As ``check_owned_dir`` for a directory Python imports from: root may own it too (``/opt``, ``/usr``)."""
    info = os.stat(path)  # a symlinked package directory is common; what it points to is what is checked
    problem = _problem(info, owners=(os.getuid(), 0))
    if problem is not None:
        raise UnsafePathError(f"refusing {what} {path}: it {problem}, so another user could plant a module "
                              "(sitecustomize.py, or one named like yours) that your tasks would import. Fix: "
                              "move the package into a directory only you (or root) can write.", path=path)
    return Path(path)


def owned_dir(path: str | os.PathLike[str], *, what: str, mode: int = 0o700, parents: bool = True) -> Path:
    """Creates ``path`` (``mode``) or checks an existing one (``check_owned_dir``); refuses an unsafe parent.

    A parent another user owns, or others can write without the sticky bit (``/tmp`` has it), would let them
    rename the directory away and put their own in its place (``_check_parent``).
    """
    path = Path(path)
    parent = path.parent
    if parents and not parent.exists():
        parent.mkdir(parents=True, exist_ok=True)
    _check_parent(path, what=what)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    return check_owned_dir(path, what=what, parent=False)


def write_new(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o600) -> None:
    """Writes ``data`` to ``path`` through a new temporary file renamed over it: a symlink or a file another
    user planted at ``path`` is replaced, never written through."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_append(path: str | os.PathLike[str], *, truncate: bool = False, mode: int = 0o600) -> int:
    """A descriptor to append to ``path``, never through a symlink; only a regular file of this user.

    Raises:
        UnsafePathError: a symlink, a non-regular file (a FIFO would block), or another user's file at ``path``.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO with no reader
            raise UnsafePathError(f"refusing to write {path}: it is a symlink or a FIFO. Fix: remove it.",
                                  path=path) from exc
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise UnsafePathError(f"refusing to write {path}: it is not a regular file of yours (owner "
                              f"{_user(info.st_uid)}). Fix: remove it.", path=path)
    os.set_blocking(fd, True)
    if truncate:  # only now that it is known to be this user's own file
        os.ftruncate(fd, 0)
    return fd


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading if it is a regular file of this user, never a symlink or a FIFO (which
    would block the reader forever).

    Raises:
        FileNotFoundError: nothing there.
        UnsafePathError: a symlink, a FIFO or device, or another user's file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"refusing to read {path}: it is a symlink", path=path) from exc
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        what = "a regular file" if stat.S_ISREG(info.st_mode) else "not a regular file (a FIFO, a device...)"
        raise UnsafePathError(f"refusing to read {path}: it is {what} owned by {_user(info.st_uid)}", path=path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path`` (``open_regular``'s checks)."""
    with open_regular(path) as fh:
        return fh.read(limit)
