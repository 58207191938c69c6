"""The outbound policy: which addresses the kit's own callers may connect to, and how much of an
answer they read.

A deployed kit holds a callback key TrainGate trusts and may run inside a user's VPC, while the
address it calls (``server_url``) comes from the init. So every connection the TrainGate client
(and ``rollout-sdk test``'s forwarder) opens is checked against this policy after resolution: a
literal address when the URL is sent, a name's every resolved address in the resolver the
transport's connector is given (:class:`~rollout_sdk.traingate.transport.AiohttpTransport`), so a
name that resolves, or later re-resolves, to a refused address is never contacted. Init resolves
nothing: it checks the allowlist and literal addresses only (:mod:`rollout_sdk.engine.rules`).

Where the kit runs decides which addresses it may call (:class:`Reach`): on Lambda only public
ones; on ``serve``, ``demo`` and ``test`` loopback and private ones too, since TrainGate often
runs beside them. ``ROLLOUT_SDK_OUTBOUND_ADDRESSES`` overrides that default. Link-local addresses
(cloud metadata lives there) are refused everywhere unless ``ROLLOUT_SDK_ALLOW_LINK_LOCAL``. A
host named in ``ROLLOUT_SDK_ALLOWED_SERVER_HOSTS`` (``host`` or ``host:port``) is trusted at any
address but link-local: that is how a private TrainGate inside the VPC is allowed.

Pure: no I/O, no HTTP stack; the transport and the init rules apply it. How a host is written
and compared (literal addresses in every spelling, allowlist entries) is :mod:`rollout_sdk.hosts`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from rollout_sdk.hosts import (
    AllowedHost,
    IPAddress,
    literal_address,
    normal_host,
    parse_allowed_hosts,
)

# The settings' names (KitSettings, env prefix ROLLOUT_SDK_), as the refusals name them. Spelled
# out rather than imported: the settings validate the allowlist with rollout_sdk.hosts, and the
# policy needs no more of them than the four fields of OutboundSettings.
ALLOWED_HOSTS_VARIABLE = "ROLLOUT_SDK_ALLOWED_SERVER_HOSTS"
ALLOW_LINK_LOCAL_VARIABLE = "ROLLOUT_SDK_ALLOW_LINK_LOCAL"

#: The default cap on one answer's body (after decoding): 32 MiB. A real chat answer is far
#: smaller: a 32k-token completion with a log-probability and a token id per token is about
#: 1 MB of JSON, and a callback's answer is a few bytes. The worker's default memory is 512 MB,
#: so one answer of this size still leaves room for the other rollouts of a queue batch.
DEFAULT_MAX_ANSWER_BYTES = 32 * 1024 * 1024

#: AWS's instance metadata service on IPv6 (Nitro): not link-local, but the same service.
_METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254")})
#: The well-known NAT64 prefix: an address in it reaches the IPv4 address in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: Local-use NAT64 (RFC 8215): where the IPv4 address sits depends on the operator's prefix.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")


class Reach(StrEnum):
    """Which addresses a kit's callers may connect to, beyond the hosts it is told to trust."""

    #: Public (globally routable) addresses only: on Lambda.
    PUBLIC = "public"
    #: Public, loopback, private (RFC 1918), shared (100.64.0.0/10) and unique-local ones: the
    #: local server, the demo and ``rollout-sdk test``.
    PRIVATE = "private"


class Kind(StrEnum):
    """What an address that is not public is, as a refusal names it."""

    LINK_LOCAL = "a link-local or cloud-metadata address"
    UNSPECIFIED = "the unspecified address"
    LOOPBACK = "a loopback address"
    MULTICAST = "a multicast address"
    SHARED = "a shared address (100.64.0.0/10, carrier-grade NAT)"
    PRIVATE = "a private address (RFC 1918)"
    UNIQUE_LOCAL = "a unique-local address (fc00::/7)"
    RESERVED = "a reserved or special-purpose address"


class OutboundSettings(Protocol):
    """What the policy reads of the settings (``KitSettings`` has these fields)."""

    @property
    def outbound_addresses(self) -> str | None: ...
    @property
    def allowed_server_hosts(self) -> str: ...
    @property
    def allow_link_local(self) -> bool: ...
    @property
    def max_answer_bytes(self) -> int: ...


#: Hosts a policy keeps its answer for (one TrainGate is one or two; a shared server a few).
_ANSWERS_KEPT = 1024

#: The kinds ``Reach.PRIVATE`` adds to the public addresses.
_PRIVATE_KINDS = frozenset({Kind.LOOPBACK, Kind.PRIVATE, Kind.SHARED, Kind.UNIQUE_LOCAL})


def _embedded(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address reaches (IPv4-mapped, NAT64, 6to4), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def kind_of(address: IPAddress) -> Kind | None:
    """What ``address`` is when it is not a public one (None: public)."""
    reached = _embedded(address)
    if address in _METADATA_ADDRESSES or reached.is_link_local:
        return Kind.LINK_LOCAL
    if reached.is_unspecified:
        return Kind.UNSPECIFIED
    if reached.is_loopback:
        return Kind.LOOPBACK
    if reached.is_multicast:
        return Kind.MULTICAST
    if isinstance(reached, ipaddress.IPv4Address):
        if reached in _SHARED:
            return Kind.SHARED
        if any(reached in network for network in _RFC1918):
            return Kind.PRIVATE
    elif reached in _UNIQUE_LOCAL:
        return Kind.UNIQUE_LOCAL
    if (
        not reached.is_global
        or reached.is_reserved
        or address in _NAT64_LOCAL
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
        or (isinstance(address, ipaddress.IPv6Address) and address.teredo is not None)
    ):
        return Kind.RESERVED
    return None


def _special_name(host: str) -> Kind | None:
    """A name that is an address by definition: ``localhost`` and ``*.localhost`` (RFC 6761)."""
    return Kind.LOOPBACK if host == "localhost" or host.endswith(".localhost") else None


@dataclass(frozen=True)
class OutboundPolicy:
    """Which addresses may be connected to, and the largest answer read (``max_answer_bytes``)."""

    reach: Reach = Reach.PRIVATE
    allowed: tuple[AllowedHost, ...] = ()
    allow_link_local: bool = False
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    #: The answer of each host and port already checked (it never changes): the transport asks
    #: on every request, so a request costs a lookup, not a parse. Bounded, as init names hosts.
    _answers: dict[tuple[str, int], str | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def from_settings(cls, kit: OutboundSettings, *, where: Reach) -> OutboundPolicy:
        """The policy of a kit running ``where`` (Lambda: PUBLIC; local: PRIVATE), unless
        ``ROLLOUT_SDK_OUTBOUND_ADDRESSES`` says otherwise."""
        return cls(
            reach=Reach(kit.outbound_addresses) if kit.outbound_addresses else where,
            allowed=parse_allowed_hosts(kit.allowed_server_hosts),
            allow_link_local=kit.allow_link_local,
            max_answer_bytes=kit.max_answer_bytes,
        )

    def trusts(self, host: str, port: int) -> bool:
        """``host`` (normalised) is named in the allowlist, on ``port``."""
        return any(entry.admits(host, port) for entry in self.allowed)

    def host_refusal(self, host: str, port: int) -> str | None:
        """Why ``host`` may not be called on ``port`` before any resolution (the allowlist, a
        literal address, ``localhost``), else None. ``host`` as a URL gives it."""
        key = (host, port)
        try:
            return self._answers[key]
        except KeyError:
            pass
        if len(self._answers) >= _ANSWERS_KEPT:
            self._answers.clear()
        answer = self._answers[key] = self._host_refusal(normal_host(host), port)
        return answer

    def _host_refusal(self, host: str, port: int) -> str | None:
        if self.allowed and not self.trusts(host, port):
            return f"is not in the allowed hosts ({ALLOWED_HOSTS_VARIABLE})"
        address = literal_address(host)
        if address is not None:
            return self.address_refusal(address, host=host, port=port)
        kind = _special_name(host)
        if kind is None or self.trusts(host, port) or self._reaches(kind):
            return None
        return self._refused(kind, host)

    def _reaches(self, kind: Kind) -> bool:
        return self.reach is Reach.PRIVATE and kind in _PRIVATE_KINDS

    def address_refusal(self, address: IPAddress, *, host: str, port: int) -> str | None:
        """Why ``address`` (what ``host`` resolved to) may not be connected to, else None."""
        kind = kind_of(address)
        if kind is None:
            return None
        if kind is Kind.LINK_LOCAL:
            if self.allow_link_local:
                return None
            return f"is {kind.value} ({address}); refused unless {ALLOW_LINK_LOCAL_VARIABLE}=true"
        if self.trusts(normal_host(host), port) or self._reaches(kind):
            return None
        return self._refused(kind, str(address))

    def _refused(self, kind: Kind, address: str) -> str:
        where = (
            "this deployment calls only public addresses"
            if self.reach is Reach.PUBLIC
            else "the kit calls no such address"
        )
        return (
            f"is {kind.value} ({address}); {where}: name the host in {ALLOWED_HOSTS_VARIABLE} "
            "(on Lambda, the template parameter AllowedServerHosts) to allow it"
        )
