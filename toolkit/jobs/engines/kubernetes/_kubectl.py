"""A thin, testable wrapper around the ``kubectl`` binary.

Everything the Kubernetes backend does goes through ``Kubectl.run``, which
never uses a shell and always has a timeout, so a hung API server cannot hang
``tfdist`` forever.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from toolkit.jobs.errors import BackendError

_log = logging.getLogger(__name__)


class Kubectl:
    """Runs ``kubectl`` (found on PATH unless ``binary`` is a path)."""

    def __init__(self, binary: str = "kubectl", *, timeout: float = 60.0) -> None:
        self.binary = binary
        self.timeout = timeout
        self._checked: str | None = None

    def path(self) -> str | None:
        return shutil.which(self.binary)

    def require(self, *, manifest_path: str | None = None) -> str:
        """The kubectl path, if it exists and has a current context; else BackendError."""
        if self._checked is not None:
            return self._checked
        where = f" The manifest is in {manifest_path}; apply it with `kubectl apply -f {manifest_path}`." \
            if manifest_path else ""
        path = self.path()
        if path is None:
            raise BackendError(f"`{self.binary}` is not on PATH, so the kubernetes backend cannot reach a "
                               f"cluster. Install kubectl and configure a context.{where}",
                               manifest_path=manifest_path)
        proc = self._call(path, ["config", "current-context"])
        if proc.returncode != 0 or not proc.stdout.strip():
            raise BackendError(f"kubectl has no current context ({proc.stderr.strip() or 'none set'}). "
                               f"Run `kubectl config use-context NAME` first.{where}",
                               manifest_path=manifest_path)
        self._checked = path
        return path

    def _call(self, path: str, args: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        _log.debug("kubectl %s", " ".join(args))
        try:
            return subprocess.run([path, *args], input=stdin, capture_output=True, text=True,
                                  timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"`kubectl {' '.join(args)}` did not answer within {self.timeout:g} s; "
                               "check the cluster connection.") from exc

    def run(self, args: Sequence[str], *, stdin: str | None = None) -> str:
        """Runs ``kubectl ARGS``; returns stdout or raises BackendError with kubectl's stderr."""
        proc = self._call(self.require(), args, stdin)
        if proc.returncode != 0:
            raise BackendError(f"`kubectl {' '.join(args)}` failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def get_json(self, args: Sequence[str]) -> Any | None:
        """``kubectl get ... -o json`` parsed; None when the object does not exist."""
        proc = self._call(self.require(), [*args, "-o", "json"])
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise BackendError(f"`kubectl {' '.join(args)} -o json` failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()}")
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as exc:
            raise BackendError(f"`kubectl {' '.join(args)}` did not print JSON: {proc.stdout[:200]!r}") from exc

    def popen(self, args: Sequence[str]) -> subprocess.Popen:
        """A streaming ``kubectl`` (``logs -f``); the caller reads stdout and must wait on it."""
        return subprocess.Popen([self.require(), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, bufsize=1)
