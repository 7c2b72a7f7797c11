"""Parsing of cluster addresses (``host:port``), kept apart from the rules that use them."""
from __future__ import annotations

import re
from dataclasses import dataclass

_HOST_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_IPV6_RE = re.compile(r"^\[([0-9A-Fa-f:.]+)\]:(.*)$")
_IPV4_RE = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


@dataclass(frozen=True)
class Address:
    """A parsed ``host:port``; ``host`` keeps IPv6 brackets off."""

    host: str
    port: int

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def endpoint(self) -> tuple[str, int]:
        """Identity for duplicate detection: every loopback name is the same machine."""
        return ("<loopback>" if self.is_loopback else self.host.lower(), self.port)


def is_loopback_host(host: str) -> bool:
    """True for names that only ever reach the local machine."""
    host = host.lower()
    return host in ("localhost", "::1") or (bool(_IPV4_RE.match(host)) and host.startswith("127."))


def parse_address(text: str) -> tuple[Address | None, str | None]:
    """Parse ``host:port``; returns ``(address, None)`` or ``(None, why-and-how-to-fix)``."""
    if "://" in text:
        return None, (
            "has a URL scheme; cluster addresses are bare host:port. "
            "Drop the scheme and set `rpc_layer` (e.g. \"grpc\") instead."
        )
    ipv6 = _IPV6_RE.match(text)
    if ipv6:
        host, port_text = ipv6.group(1), ipv6.group(2)
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            return None, "has no port; expected host:port. Append the port, e.g. ':2222'."
        if ":" in host:
            return None, "looks like an IPv6 address without brackets; write it as [addr]:port."
        if not host:
            return None, "has an empty host; expected host:port. Put the machine's name or IP before ':'."
        if not _HOST_RE.match(host):
            return None, (
                f"has host {host!r} (not a host name or IP: letters, digits, "
                "'.', '-', '_' only). Fix the host part."
            )
    if not port_text.isascii() or not port_text.isdigit():
        return None, f"has port {port_text!r} (not an integer); expected 1..65535. Fix the port."
    if len(port_text.lstrip("0")) > 5:  # bounded before int(): 5,000 digits pass Python's own limit
        return None, (f"has a port of {len(port_text):,} digits ({port_text[:12]}...), outside 1..65535. "
                      "Pick a port in that range.")
    port = int(port_text)
    if port > 65535:  # port 0 parses: it is legal, and the rules warn about it
        return None, f"has port {port}, outside 1..65535. Pick a port in that range."
    return Address(host, port), None
