"""Hosts as the kit compares them: the IP address a host spells (in every form a resolver takes
literally), a host's normal form, and the allowlist's ``host`` / ``host:port`` entries.

A leaf (the standard library only): the settings validate ``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``
with it, and the outbound policy (:mod:`rollout_sdk.engine.outbound`) judges addresses with it.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import unquote

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def literal_address(host: str) -> IPAddress | None:
    """The IP address ``host`` spells in any form a resolver takes literally, or None.

    Besides dotted quads and IPv6 this covers the forms ``inet_aton`` accepts (``2130706433``,
    ``0x7f000001``, ``0177.0.0.1``, ``127.1``), which name the same address to ``getaddrinfo``.
    """
    host = host.removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host.lower()):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def normal_host(host: str) -> str:
    """A host as compared: lower case, percent-decoded, no brackets or trailing dot, and an IP
    address in its canonical form."""
    host = unquote(host).strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    address = literal_address(host)
    return str(address) if address is not None else host


@dataclass(frozen=True)
class AllowedHost:
    """One allowlist entry: a host, and the one port it may be called on (None: any)."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, entry: str) -> AllowedHost:
        """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address; ValueError
        naming the entry when the port is not a number from 1 to 65535."""
        text = entry.strip()
        host, port = text, None
        if text.startswith("["):
            inside, _, rest = text[1:].partition("]")
            host, port = inside, rest.removeprefix(":") if rest.startswith(":") else None
            if rest and port is None:
                raise ValueError(f"allowed host {entry!r}: expected [address] or [address]:port")
        elif text.count(":") == 1:
            host, port = text.split(":")
        if port is None:
            return cls(normal_host(host))
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"allowed host {entry!r}: the port must be a number from 1 to 65535")
        return cls(normal_host(host), int(port))

    def admits(self, host: str, port: int) -> bool:
        return self.host == host and (self.port is None or self.port == port)


def parse_allowed_hosts(value: str) -> tuple[AllowedHost, ...]:
    """``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS``: comma-separated entries; empty allows any host."""
    return tuple(AllowedHost.parse(entry) for entry in value.split(",") if entry.strip())
