"""The v1 SDK's network helpers: address checks, and finding this host's public IPv4 address.

The checks use the standard library only, so importing this module is light. The detection asks
what the v1 SDK asked, in the same order: first the cloud metadata services (AWS IMDSv2, GCP,
Azure) at once, then, if none knows a public address, four public "what is my IP" services at
once; the first valid IPv4 answer wins. The requests go through the kit's HTTP stack (an httpx
transport over aiohttp, :mod:`rollout_sdk.traingate.transport`), imported only when detecting.
Unlike v1, the whole detection has one deadline, and the endpoints can be replaced (tests serve
them on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from rollout_sdk.errors import PublicIPDetectionError

if TYPE_CHECKING:
    # Here, as above: no HTTP client at import.
    import httpx

logger = logging.getLogger(__name__)

#: Where the AWS, GCP and Azure metadata services answer (a link-local address).
METADATA_URL = "http://169.254.169.254"
#: The public services asked when no metadata service knows an address: (name, URL).
EXTERNAL_SERVICES: tuple[tuple[str, str], ...] = (
    ("checkip.amazonaws.com", "https://checkip.amazonaws.com"),
    ("ipify", "https://api.ipify.org"),
    ("icanhazip", "https://icanhazip.com"),
    ("ifconfig.me", "https://ifconfig.me/ip"),
)
#: v1's time limits: each metadata request, all of the metadata step (IMDSv2 makes two requests
#: in a row), each external request, all of the external step.
METADATA_REQUEST_SECONDS = 2.0
METADATA_STEP_SECONDS = 2 * METADATA_REQUEST_SECONDS + 2.0
EXTERNAL_REQUEST_SECONDS = 10.0
EXTERNAL_STEP_SECONDS = EXTERNAL_REQUEST_SECONDS + 1.0
#: The default bound on the whole detection: both steps at their longest.
DETECT_TIMEOUT_SECONDS = METADATA_STEP_SECONDS + EXTERNAL_STEP_SECONDS

_MAX_VALUE_LENGTH = 260  # a 253-character host name and ":port"
_MAX_HOST_LENGTH = 253
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def validate_ipv4(ip: str) -> bool:
    """Whether ``ip`` is an IPv4 address (``"10.0.0.1"``; not ``"256.1.1.1"``, not IPv6)."""
    try:
        return ipaddress.ip_address(ip).version == 4
    except ValueError:
        return False


def is_valid_hostname_or_ip(value: str) -> bool:
    """Whether ``value`` looks like a host name, an IPv4 address, or either with ``:port``.

    A format check only (no DNS): labels of letters, digits, ``_`` and ``-`` (not at either end),
    at most 63 characters each, joined by dots; at most 253 characters, 260 with the port.
    """
    if not value or len(value) > _MAX_VALUE_LENGTH:
        return False
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit():
        host = value
    if validate_ipv4(host):
        return True
    return len(host) <= _MAX_HOST_LENGTH and _HOSTNAME.fullmatch(host) is not None


def is_private_ip(ip: str) -> bool:
    """Whether ``ip`` is a private address (RFC 1918 and the like); False when it is none."""
    try:
        return ipaddress.ip_address(ip).is_private
    except ValueError:
        return False


def detect_public_ip(
    *,
    metadata_url: str = METADATA_URL,
    external_services: Sequence[tuple[str, str]] = EXTERNAL_SERVICES,
    timeout: float = DETECT_TIMEOUT_SECONDS,
    transport: httpx.AsyncBaseTransport | None = None,
) -> str:
    """This host's public IPv4 address, as v1 found it; raises PublicIPDetectionError.

    Cloud metadata comes first: it gives the instance's own address, where an external service
    would see a NAT gateway's. Returns within about ``timeout`` seconds whatever the endpoints
    do. Blocking, as in v1; called on a running event loop, it runs on a thread of its own.
    ``metadata_url``, ``external_services`` and ``transport`` (an httpx transport; the kit's
    aiohttp one by default) are the seams tests use.
    """

    def detect() -> str:
        return asyncio.run(_detect(metadata_url, tuple(external_services), timeout, transport))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return detect()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="detect-ip") as pool:
        return pool.submit(detect).result()


_Probe = Callable[[], Awaitable[str | None]]


async def _detect(
    metadata_url: str,
    external_services: tuple[tuple[str, str], ...],
    seconds: float,
    transport: httpx.AsyncBaseTransport | None,
) -> str:
    # Here: v1's helper; importing the facade's network names loads no HTTP client.
    from rollout_sdk.traingate.transport import AiohttpTransport

    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    http = _Http(transport if transport is not None else AiohttpTransport(max_connections=8))
    try:
        base = metadata_url.rstrip("/")
        cloud: list[_Probe] = [
            lambda: _aws(http, base),
            lambda: _metadata(http, "GCP", base + _GCP_PATH, {"Metadata-Flavor": "Google"}),
            lambda: _metadata(
                http, "Azure", base + _AZURE_PATH, {"Metadata": "true"}, _AZURE_PARAMS
            ),
        ]
        ip = await _first(cloud, min(METADATA_STEP_SECONDS, deadline - loop.time()))
        if ip is not None:
            return ip
        logger.info("no cloud metadata service knows a public IP; asking external services")
        external: list[_Probe] = [
            functools.partial(_external, http, name, url) for name, url in external_services
        ]
        ip = await _first(external, min(EXTERNAL_STEP_SECONDS, deadline - loop.time()))
        if ip is not None:
            return ip
    finally:
        if transport is None:
            await http.transport.aclose()
    raise PublicIPDetectionError(
        "Could not find this host's public IP address: no cloud metadata service (AWS, GCP, "
        "Azure) gave one, and no external IP service answered with one in time. "
        "Give the address or host name explicitly."
    )


async def _first(probes: list[_Probe], seconds: float) -> str | None:
    """The first address any probe finds within ``seconds``; the rest are cancelled."""
    if seconds <= 0:
        return None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pending = {asyncio.ensure_future(probe()) for probe in probes}
    try:
        while pending:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            done, pending = await asyncio.wait(
                pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                ip = task.result()
                if ip is not None:
                    return ip
        return None
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


_IMDS_SESSION_PATH = "/latest/api/token"
_AWS_IP_PATH = "/latest/meta-data/public-ipv4"
_GCP_PATH = "/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip"
_AZURE_PATH = "/metadata/instance/network/interface/0/ipv4/ipAddress/0/publicIpAddress"
_AZURE_PARAMS = {"api-version": "2021-02-01", "format": "text"}


class _Http:
    """One request at a time through an httpx transport, its answer read whole; None for any
    failure to get one (each probe only wants an address or nothing)."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def call(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        params: dict[str, str] | None = None,
        seconds: float,
    ) -> httpx.Response | None:
        # Here, as above: no HTTP client at import.
        import httpx

        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), seconds)
        request = httpx.Request(
            method, url, headers=headers, params=params, extensions={"timeout": timeouts}
        )
        try:
            answer = await self.transport.handle_async_request(request)
            try:
                await answer.aread()
            finally:
                await answer.aclose()
        except httpx.HTTPError as exc:
            logger.debug("%s %s failed: %s: %s", method, url, type(exc).__name__, exc)
            return None
        return answer


def _address(answer: httpx.Response | None, source: str) -> str | None:
    """The IPv4 address a 2xx answer holds, else None (a 404 means "no public address")."""
    if answer is None:
        return None
    if answer.status_code == 404:
        logger.info("%s: this instance has no public IP address", source)
        return None
    if not 200 <= answer.status_code < 300:
        logger.debug("%s answered %d", source, answer.status_code)
        return None
    ip = answer.text.strip()
    if not validate_ipv4(ip):
        logger.debug("%s answered with no IPv4 address: %r", source, ip[:100])
        return None
    logger.info("public IP %s found through %s", ip, source)
    return ip


async def _aws(http: _Http, base: str) -> str | None:
    # IMDSv2: a session token first, then the address with it.
    token = await http.call(
        "PUT",
        base + _IMDS_SESSION_PATH,
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
        seconds=METADATA_REQUEST_SECONDS,
    )
    if token is None or not 200 <= token.status_code < 300:
        return None
    answer = await http.call(
        "GET",
        base + _AWS_IP_PATH,
        headers={"X-aws-ec2-metadata-token": token.text},
        seconds=METADATA_REQUEST_SECONDS,
    )
    return _address(answer, "AWS metadata")


async def _metadata(
    http: _Http,
    cloud: str,
    url: str,
    headers: dict[str, str],
    params: dict[str, str] | None = None,
) -> str | None:
    answer = await http.call(
        "GET", url, headers=headers, params=params, seconds=METADATA_REQUEST_SECONDS
    )
    return _address(answer, f"{cloud} metadata")


async def _external(http: _Http, name: str, url: str) -> str | None:
    answer = await http.call("GET", url, headers={}, seconds=EXTERNAL_REQUEST_SECONDS)
    return _address(answer, f"external service {name}")
