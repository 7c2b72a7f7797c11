"""A private network namespace for a whole local cluster.

TensorFlow's gRPC servers listen on every interface, whatever host the cluster
spec names, and run whatever graph they are sent without authentication
(tensorflow#11689). A local cluster therefore runs inside a network namespace
of its own: ``unshare --user --net --map-root-user`` starts a small holder
process there, which brings the loopback interface up (one ioctl, no ``ip``
needed); every task is then started through ``nsenter`` into the holder's
user and network namespaces. The tasks stay ordinary children of the
launcher (same pids, process groups, exit codes and log pipes), so restarts,
logs and the job store work as without isolation; only their ports are
invisible from the host and from every other namespace.

The holder lives as long as the launcher holds its stdin pipe. When the pipe
closes (the launcher is done, or died), the holder kills whatever is still
running in its namespace and exits, so a killed launcher leaves no reachable
server behind.
"""
from __future__ import annotations

import functools
import logging
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

logger = logging.getLogger(__name__)

ENV_ISOLATE = "TFDIST_ISOLATE"
_START_TIMEOUT = 15.0

# Runs inside the new namespaces: loopback up, "ready", then wait for the launcher to let go.
_HOLDER = r"""
import fcntl, os, signal, socket, struct, sys
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.buffer.read()
mine = os.readlink("/proc/self/ns/net")
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            if os.readlink(f"/proc/{entry}/ns/net") == mine:
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass
"""


class IsolationError(RuntimeError):
    """The private network namespace could not be set up."""


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why this machine cannot isolate a cluster, or None when it can (probed once per process)."""
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} (util-linux) not found"
    try:
        probe = subprocess.run(["unshare", "--user", "--net", "--map-root-user", "true"], capture_output=True,
                               timeout=10, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if probe.returncode != 0:
        why = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"the kernel refuses unprivileged user namespaces ({why[-1] if why else probe.returncode})"
    return None


def resolve(isolate: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to isolate: ``isolate`` if given, else ``TFDIST_ISOLATE`` (0/1), else wherever possible.

    Raises:
        IsolationError: isolation was asked for explicitly and this machine cannot do it.
    """
    env = os.environ if environ is None else environ
    if isolate is None and env.get(ENV_ISOLATE, "").strip():
        isolate = env[ENV_ISOLATE].strip().lower() not in ("0", "false", "no", "off")
    reason = unavailable_reason() if isolate is not False else None
    if isolate and reason:
        raise IsolationError(f"cannot isolate the cluster's network: {reason}. Run without isolation "
                             "(isolate=False) or enable unprivileged user namespaces.")
    if isolate is None and reason:
        logger.warning("task ports are reachable from the network: cannot isolate the cluster (%s)", reason)
        return False
    return isolate is not False


class NetworkNamespace:
    """The holder of one private network namespace; ``wrap`` a command to run it inside."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "--user", "--net", "--map-root-user", sys.executable, "-I", "-c", _HOLDER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert self.holder.stdout is not None and self.holder.stderr is not None  # the pipes were asked for
        ready, _, _ = select.select([self.holder.stdout], [], [], _START_TIMEOUT)
        line = self.holder.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.holder.kill()
            error = self.holder.stderr.read().decode(errors="replace").strip()
            self.close()
            raise IsolationError(f"the network namespace did not start: {error or 'no answer'}")
        logger.info("tasks run in a private network namespace (holder pid %d)", self.holder.pid)

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside the namespace; ``nsenter`` execs it, so the pid stays the task's own."""
        return ["nsenter", f"--target={self.holder.pid}", "--user", "--net", "--preserve-credentials", "--",
                *cmd]

    def close(self) -> None:
        """Lets the holder go: it kills anything left in the namespace, then exits."""
        if self.holder.stdin is not None and not self.holder.stdin.closed:
            self.holder.stdin.close()
        try:
            self.holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait(timeout=10)
        for pipe in (self.holder.stdout, self.holder.stderr):
            if pipe is not None:
                pipe.close()
