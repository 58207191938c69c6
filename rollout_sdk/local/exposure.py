"""Who can reach a local server: closed unless opened on purpose.

Whoever can call a server with no key can start, read and cancel its rollouts, and make the
machine it runs on call any address the outbound policy lets through (on the local server,
the developer's private network). So:

- a server bound to an address other machines can reach needs a server key, unless the
  operator says the network is trusted (``--allow-unauthenticated``);
- a loopback server, which other machines cannot reach, answers only requests whose Host
  header names it (:mod:`rollout_sdk.http.host_check`): that is what keeps a web page in the
  developer's browser from driving it through DNS rebinding.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout_sdk.errors import ServeError
from rollout_sdk.hosts import AllowedHost, literal_address, normal_host
from rollout_sdk.http.host_check import LOOPBACK_NAMES

#: The opt-out, as ``rollout-sdk serve`` spells it and as ``serve_agent_loop`` does.
OPT_OUT_FLAG = "--allow-unauthenticated"
OPT_OUT_ARGUMENT = "allow_unauthenticated=True"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` listens on loopback only (``localhost``, 127/8, ``::1``); a
    name other than ``localhost`` may resolve anywhere, so it is not."""
    normal = normal_host(host)
    if normal == "localhost":
        return True
    address = literal_address(normal)
    return address is not None and address.is_loopback


@dataclass(frozen=True)
class Exposure:
    """Where a local server listens, whether it holds a key, and the names it answers to.

    ``allowed_hosts``: more names (``host`` or ``host:port``) the Host check admits: a name in
    ``/etc/hosts``, or a tunnel's or reverse proxy's name.
    """

    host: str
    port: int
    keyed: bool
    allow_unauthenticated: bool = False
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.allowed_hosts:
            try:
                AllowedHost.parse(entry)
            except ValueError as exc:
                raise ServeError(f"--allowed-host: {exc}") from None

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def check(self, *, flag: str = OPT_OUT_FLAG, key_hint: str = "--api-key KEY") -> None:
        """Raise ServeError when the server would be open to other machines with no key.

        ``flag`` and ``key_hint`` are how the caller spells the opt-out and the key (the CLI's
        flags, or ``serve_agent_loop``'s arguments), so the message names what to change.
        """
        if self.keyed or self.loopback or self.allow_unauthenticated:
            return
        where = self.host or "every address"
        raise ServeError(
            f"refusing to serve on {where}:{self.port} without a server key: anyone who can "
            "reach that port could start, read and cancel rollouts, and make this machine call "
            f"addresses on its network. Set a key ({key_hint}, or ROLLOUT_SDK_SERVER_KEY), "
            f"bind 127.0.0.1, or, on a network you trust, pass {flag}"
        )

    def host_check(self) -> tuple[str, ...] | None:
        """The Host header values the server answers to, or None for no check.

        A loopback server always checks (its own address, ``localhost``, ``127.0.0.1``,
        ``[::1]`` and ``allowed_hosts``). A server bound elsewhere checks only when given
        ``allowed_hosts``: the names other machines reach it by are not known here.
        """
        if not self.loopback and not self.allowed_hosts:
            return None
        names = [*LOOPBACK_NAMES, *self.allowed_hosts]
        bound = normal_host(self.host)
        address = literal_address(bound)
        if bound and not (address is not None and address.is_unspecified):
            names.append(bound)  # a specific address it is bound to (0.0.0.0 names none)
        return tuple(dict.fromkeys(names))

    def describe(self) -> str:
        """The access line the server prints at start-up."""
        key = "required" if self.keyed else "none"
        checked = self.host_check()
        hosts = f"; Host must be one of {', '.join(checked)}" if checked else ""
        if not self.keyed and not self.loopback:
            key += f" ({OPT_OUT_FLAG}: open to every machine that can reach this port)"
        return f"server key: {key}{hosts}"
