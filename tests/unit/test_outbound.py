"""The outbound policy (rollout_sdk/traingate/outbound.py): which addresses, in every spelling a
resolver accepts, each reach refuses; the allowlist's ``host:port`` entries; the resolver's
check of every resolved address."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import ValidationError

from rollout_sdk.engine.rules import check_server_url
from rollout_sdk.errors import ServerUrlRefused
from rollout_sdk.hosts import AllowedHost, literal_address
from rollout_sdk.settings import KitSettings
from rollout_sdk.traingate.outbound import Kind, OutboundPolicy, Reach, kind_of
from rollout_sdk.traingate.transport import PolicyResolver, _Refused

LAMBDA = OutboundPolicy(reach=Reach.PUBLIC)
LOCAL = OutboundPolicy(reach=Reach.PRIVATE)

#: Refused on Lambda, allowed locally: loopback, private, shared and unique-local, as spelled.
INSIDE = [
    "http://127.0.0.1:8081/tg",
    "http://2130706433/",  # 127.0.0.1 in decimal
    "http://0x7f000001/",  # in hex
    "http://0177.0.0.1/",  # in octal
    "http://127.1/",  # the short form
    "http://[::1]:9000",
    "http://[0:0:0:0:0:0:0:1]",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[::ffff:7f00:1]/",
    "http://[64:ff9b::7f00:1]/",  # NAT64 of loopback
    "http://[2002:7f00:1::]/",  # 6to4 of loopback
    "http://10.0.0.5/",
    "http://172.16.3.4/",
    "http://192.168.1.10:8000",
    "http://100.64.0.1/",
    "http://[fd00::1]/",
    "http://[::ffff:10.1.2.3]/",
    "http://localhost:8081",
    "http://LOCALHOST./",
    "http://api.localhost/",
]

#: Refused everywhere: unspecified, multicast, reserved and special-purpose, link-local.
NEVER = [
    "http://0.0.0.0:8081",
    "http://0/",
    "http://[::]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://192.0.2.1/",  # documentation
    "http://198.18.0.1/",  # benchmarking
    "http://[2001:db8::1]/",
    "http://[fec0::1]/",  # deprecated site-local
    "http://[64:ff9b:1::a00:1]/",  # local-use NAT64
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://169.254.169.254/latest/meta-data",
    "http://[fd00:ec2::254]/",
]

PUBLIC = [
    "https://traingate.example.com/v1",
    "http://8.8.8.8:8081",
    "http://[2001:4860:4860::8888]/",
    "http://[::ffff:8.8.8.8]/",
    "http://134744072/",  # 8.8.8.8 in decimal
]


@pytest.mark.parametrize("url", INSIDE)
def test_inside_the_network_is_refused_on_lambda_and_allowed_locally(url: str) -> None:
    with pytest.raises(ServerUrlRefused, match="AllowedServerHosts") as refused:
        check_server_url(url, LAMBDA)
    assert "only public addresses" in str(refused.value)
    check_server_url(url, LOCAL)


@pytest.mark.parametrize("url", NEVER)
def test_special_addresses_are_refused_everywhere(url: str) -> None:
    for policy in (LAMBDA, LOCAL):
        with pytest.raises(ServerUrlRefused):
            check_server_url(url, policy)


@pytest.mark.parametrize("url", PUBLIC)
def test_public_addresses_and_names_pass_init(url: str) -> None:
    check_server_url(url, LAMBDA)
    check_server_url(url, LOCAL)


def test_each_kind_is_named() -> None:
    expected = {
        "127.0.0.1": Kind.LOOPBACK,
        "::1": Kind.LOOPBACK,
        "10.0.0.1": Kind.PRIVATE,
        "100.64.0.1": Kind.SHARED,
        "fd12::1": Kind.UNIQUE_LOCAL,
        "0.0.0.0": Kind.UNSPECIFIED,
        "224.0.0.1": Kind.MULTICAST,
        "169.254.1.1": Kind.LINK_LOCAL,
        "fe80::1": Kind.LINK_LOCAL,
        "240.0.0.1": Kind.RESERVED,
        "1.1.1.1": None,
    }
    assert {a: kind_of(ipaddress.ip_address(a)) for a in expected} == expected
    assert literal_address("0x7f.1") == ipaddress.ip_address("127.0.0.1")
    assert literal_address("traingate.example") is None


def test_link_local_needs_its_own_switch_even_for_a_named_host() -> None:
    named = OutboundPolicy.from_settings(
        KitSettings(allowed_server_hosts="169.254.169.254"), where=Reach.PUBLIC
    )
    with pytest.raises(ServerUrlRefused, match="ROLLOUT_SDK_ALLOW_LINK_LOCAL"):
        check_server_url("http://169.254.169.254", named)
    switched = OutboundPolicy.from_settings(
        KitSettings(allowed_server_hosts="169.254.169.254", allow_link_local=True),
        where=Reach.PUBLIC,
    )
    check_server_url("http://169.254.169.254", switched)


def test_allowlist_entries_are_hosts_or_hosts_with_their_port() -> None:
    policy = OutboundPolicy.from_settings(
        KitSettings(allowed_server_hosts="127.0.0.1:8081, [::1]:80, TrainGate.Internal ,[fd00::5]"),
        where=Reach.PUBLIC,
    )
    assert policy.allowed == (
        AllowedHost("127.0.0.1", 8081),
        AllowedHost("::1", 80),
        AllowedHost("traingate.internal"),
        AllowedHost("fd00::5"),
    )
    for url in (
        "http://127.0.0.1:8081/tg",
        "http://[::1]",  # port 80 by default
        "http://traingate.internal:9000",  # any port
        "https://TRAINGATE.internal./",
        "http://[fd00::5]:1",
    ):
        check_server_url(url, policy)
    for url in ("http://127.0.0.1:8082", "https://[::1]", "http://evil.test", "http://localhost"):
        with pytest.raises(ServerUrlRefused, match="ROLLOUT_SDK_ALLOWED_SERVER_HOSTS"):
            check_server_url(url, policy)


@pytest.mark.parametrize("entry", ["host:0", "host:65536", "host:http", "[::1]x", "[::1]:"])
def test_a_bad_allowlist_entry_is_a_settings_error_naming_it(entry: str) -> None:
    with pytest.raises(ValidationError, match="allowed host"):
        KitSettings(allowed_server_hosts=f"ok.example,{entry}")


def test_the_setting_overrides_where_the_kit_runs() -> None:
    assert OutboundPolicy.from_settings(KitSettings(), where=Reach.PUBLIC).reach is Reach.PUBLIC
    opened = OutboundPolicy.from_settings(
        KitSettings(outbound_addresses="private"), where=Reach.PUBLIC
    )
    assert opened.reach is Reach.PRIVATE
    closed = OutboundPolicy.from_settings(
        KitSettings(outbound_addresses="public"), where=Reach.PRIVATE
    )
    assert closed.reach is Reach.PUBLIC
    with pytest.raises(ValidationError):
        KitSettings(outbound_addresses="anywhere")


class Fixed(AbstractResolver):
    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=a, port=port, family=family, proto=0, flags=0)
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("addresses", "refused"),
    [
        (("93.184.216.34",), False),
        (("2606:2800:220:1::1",), False),
        (("127.0.0.1",), True),
        (("93.184.216.34", "10.0.0.1"), True),  # any refused address refuses the name
        (("::ffff:192.168.0.1",), True),
        (("fe80::1%2",), True),  # a scoped link-local answer
    ],
)
async def test_the_resolver_checks_every_address_a_name_resolves_to(
    addresses: tuple[str, ...], refused: bool
) -> None:
    resolver = PolicyResolver(LAMBDA, Fixed(*addresses))
    if refused:
        with pytest.raises(_Refused, match="resolves to"):
            await resolver.resolve("traingate.example", 443)
    else:
        assert len(await resolver.resolve("traingate.example", 443)) == len(addresses)


async def test_a_named_host_is_trusted_at_its_private_addresses_but_not_link_local() -> None:
    named = OutboundPolicy(reach=Reach.PUBLIC, allowed=(AllowedHost("tg.internal", 8443),))
    assert await PolicyResolver(named, Fixed("10.0.0.9")).resolve("tg.internal", 8443)
    with pytest.raises(_Refused):
        await PolicyResolver(named, Fixed("10.0.0.9")).resolve("tg.internal", 8444)
    with pytest.raises(_Refused, match="link-local"):
        await PolicyResolver(named, Fixed("169.254.169.254")).resolve("tg.internal", 8443)
