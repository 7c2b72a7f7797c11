"""Whose socket listens on a task's port: without a private network namespace, another user can take it.

The launcher picks free ports, and TensorFlow's servers bind them a moment
later; TensorFlow turns ``SO_REUSEPORT`` off, so the port cannot be held in
between. Under ``isolate=False`` another local user can bind a task's port
first, and the job's gRPC clients would talk to their socket. The kernel
names each listening socket's owner (``/proc/net/tcp``, ``tcp6``: the uid
column), so the launcher checks the job's ports while it runs and stops a job
whose port another user listens on.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["foreign_listeners", "listeners"]

_LISTEN = "0A"


def listeners(ports: Iterable[int], *, uid: int | None = None) -> dict[int, int]:
    """``{port: uid}`` of the sockets listening on ``ports``: another user's (not ``uid``, default this
    process's) where there is one, else this user's; empty where ``/proc/net/tcp`` cannot be read."""
    wanted, me = set(ports), os.getuid() if uid is None else uid
    found: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                rows = fh.read(8 << 20).splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            port, owner = int(fields[1].rpartition(":")[2], 16), int(fields[7])
            if port in wanted and found.get(port, me) == me:
                found[port] = owner
    return found


def foreign_listeners(ports: Iterable[int], *, uid: int | None = None) -> dict[int, int]:
    """``{port: uid}`` of the sockets listening on ``ports`` that another user (not ``uid``, default this
    process's) owns; empty where ``/proc/net/tcp`` cannot be read."""
    me = os.getuid() if uid is None else uid
    return {port: owner for port, owner in listeners(ports, uid=me).items() if owner != me}
