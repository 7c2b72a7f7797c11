"""The job's private shutdown signal directory (``TFDIST_SIGNAL_DIR``): one for every launcher.

The serve/goodbye protocol's signals are files in a directory of the job's user
(``strategies._signals``). A fixed name (``<tmp>/tfdist-<uid>``) lets another
user create it first and stop every parameter-server job of that user, so each
launch names its own, at random:

- the local launcher makes it (``mkdtemp``, mode 0700) and removes it at the end;
- a launch whose tasks run on other machines (Ray, Slurm) cannot make it there,
  so it only picks the name, the same on every node (a sender computes the
  receiver's path), under ``/tmp``, which every Linux node has; each task
  creates it 0700 on its own node before it listens (``ensure_private_dir``,
  which refuses one another user made: with 128 random bits, none can).

A directory named in the launch's environment is used as it is.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import MutableMapping

from toolkit.launcher._spec import ENV_SIGNAL_DIR

__all__ = ["make_signal_dir", "name_remote_signal_dir", "remove_if_empty"]

_REMOTE_BASE = "/tmp"  # noqa: S108 - a name only, random and created 0700 by each task (see above)


def make_signal_dir(env: MutableMapping[str, str]) -> str | None:
    """Makes a new private directory into ``env`` unless it names one; returns it (to remove), or None."""
    if env.get(ENV_SIGNAL_DIR):
        return None
    path = env[ENV_SIGNAL_DIR] = tempfile.mkdtemp(prefix="tfdist-signals-")
    return path


def name_remote_signal_dir(env: MutableMapping[str, str]) -> str:
    """Puts a new random directory name into ``env`` unless it names one (tasks create it on their nodes)."""
    if not env.get(ENV_SIGNAL_DIR):
        env[ENV_SIGNAL_DIR] = os.path.join(_REMOTE_BASE, f"tfdist-signals-{secrets.token_hex(16)}")
    return env[ENV_SIGNAL_DIR]


def remove_if_empty(path: str | None) -> None:
    """Removes a task's node's signal directory once it is empty (another task on the node may still use it)."""
    if path:
        with contextlib.suppress(OSError):
            os.rmdir(path)
