"""A multi-node Slurm job's directories must be on storage every node sees.

A path is shared when it lies on a network or cluster filesystem (NFS, Lustre,
GPFS, BeeGFS, CephFS, SMB, 9p, ...), read from ``/proc/mounts``, or when the
user asserts it (``shared_dirs``): a local disk would leave each node's
checkpoints and logs where the others never look.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from toolkit.launcher._spec import LaunchError

__all__ = ["SHARED_FILESYSTEMS", "check_shared", "filesystem_of", "status_dir"]

SHARED_FILESYSTEMS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cephfs", "cifs", "smb3",
                                "9p", "virtiofs", "glusterfs", "fuse.glusterfs", "fuse.sshfs", "panfs", "wekafs",
                                "fuse.juicefs", "fuse.s3fs", "fuse.gcsfuse"})


def filesystem_of(path: str, mounts: str = "/proc/mounts") -> str:
    """The type of the filesystem ``path`` lives on (the longest mount point above it)."""
    path = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open(mounts) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, kind = point, parts[2]
    except OSError:
        return "unknown"
    return kind


def check_shared(paths: Sequence[str], *, nodes: int | None, asserted: bool) -> None:
    """Refuses a local path for a job that may span nodes (``nodes`` other than 1)."""
    if asserted or nodes == 1:
        return
    for path in paths:
        kind = filesystem_of(path)
        if kind not in SHARED_FILESYSTEMS:
            raise LaunchError(
                f"`job_dir` {path!r} is on a local {kind} filesystem, but the Slurm job may run on several "
                "nodes, which would each write to their own disk. Put it on storage every node mounts at the "
                "same path (NFS, Lustre, ...), run on one node (nodes=1), or assert the path is shared "
                "(shared_dirs=True).", field="job_dir")


def status_dir(job_dir: Path) -> Path:
    """Where each task reports its node, pid, restarts and exit code (one JSON file per task)."""
    return job_dir / "slurm" / "tasks"
