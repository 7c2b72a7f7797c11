"""Who may read the dashboard: whoever holds its token, as with Jupyter.

The server binds to loopback by default, but any local user can reach a
loopback port. So every request except the static code must carry the token
that ``tfdist ui`` prints (and writes, 0600, to ``$TFDIST_HOME/ui/``, a
directory only you can read):

- the URL ``http://127.0.0.1:PORT/?token=T`` sets a cookie (``HttpOnly``,
  ``SameSite=Strict``) and redirects to the same page without the token, so it
  stays out of the history and of ``Referer`` headers;
- scripts send ``Authorization: token T``.

Two more checks close the browser's side doors: the ``Host`` header must name
this server (a DNS-rebinding page cannot pass it), and a request that changes
something (``POST``) must come from this origin.
"""
from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Auth", "write_server_file"]

COOKIE = "tfdist_ui_token"


@dataclass(frozen=True)
class Auth:
    """The token and the ``Host`` names this server answers to."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    hosts: frozenset[str] = frozenset()

    any_host: bool = False  # bound to every interface: the machine's names are not known here

    @classmethod
    def for_address(cls, host: str, port: int, token: str | None = None) -> Auth:
        """Loopback answers to its three names; a wildcard bind (``0.0.0.0``, ``::``) to any, the token alone
        guarding it (as Jupyter's ``allow_remote_access``); another address to itself."""
        token = token or secrets.token_urlsafe(32)
        if host in ("0.0.0.0", "::", ""):
            return cls(token=token, any_host=True)
        names = {host, "127.0.0.1", "localhost", "[::1]"} if host in ("127.0.0.1", "localhost", "::1") else {host}
        names = {f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names}
        return cls(token=token, hosts=frozenset(f"{n}:{port}" for n in names))

    def cookie_name(self, port: int) -> str:
        return f"{COOKIE}_{port}"  # one per port: two servers on one host do not overwrite each other's

    def host_ok(self, host: str | None) -> bool:
        return host is not None and (self.any_host or host.lower() in self.hosts)

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def request_token(self, headers: Mapping[str, str], cookies: Mapping[str, str], port: int) -> str | None:
        """The token a request carries: its ``Authorization`` header, else the cookie."""
        header = headers.get("Authorization") or ""
        scheme, _, value = header.partition(" ")
        if scheme.lower() in ("token", "bearer") and value:
            return value.strip()
        return cookies.get(self.cookie_name(port))

    def same_origin(self, origin: str | None, host: str | None) -> bool:
        """A POST must come from a page of this server (or from a script, which sends no Origin)."""
        return origin is None or (host is not None and origin.lower() in (f"http://{host.lower()}",))


def write_server_file(home: Path, *, url: str, token: str, host: str, port: int) -> Path:
    """``$TFDIST_HOME/ui/server-<pid>.json`` (0600, in a 0700 directory): how to reach this server."""
    directory = home / "ui"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / f"server-{os.getpid()}.json"
    info: dict[str, Any] = {"url": url, "token": token, "host": host, "port": port, "pid": os.getpid()}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        json.dump(info, fh)
    return path
