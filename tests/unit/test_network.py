"""v1's network helpers: the address checks, and detect_public_ip against endpoints behind
httpx.MockTransport (tests/integration/test_network.py serves them on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest

from rollout_sdk.errors import PublicIPDetectionError, RolloutError
from rollout_sdk.network import (
    EXTERNAL_SERVICES,
    METADATA_URL,
    detect_public_ip,
    is_private_ip,
    is_valid_hostname_or_ip,
    validate_ipv4,
)

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("192.168.1.1", True), ("0.0.0.0", True), ("256.1.1.1", False), ("1.2.3", False),
     ("::1", False), ("not-an-ip", False), ("", False), (" 1.2.3.4", False)],
)  # fmt: skip
def test_validate_ipv4(value: str, expected: bool) -> None:
    assert validate_ipv4(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("192.168.1.1", True), ("192.168.1.1:8080", True), ("example.com", True),
     ("sub.example.com:443", True), ("localhost", True), ("my_host", True), ("a", True),
     ("1", True), ("a" * 63 + ".com", True), ("a" * 64 + ".com", False), ("", False),
     ("has spaces", False), ("-bad.com", False), ("bad-.com", False), ("a..b", False),
     ("host:port", False), ("example.com\n", False), ("::1", False),
     (".".join(["a" * 63] * 4), False), ("x" * 261, False)],
)  # fmt: skip
def test_is_valid_hostname_or_ip(value: str, expected: bool) -> None:
    assert is_valid_hostname_or_ip(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("10.0.0.1", True), ("172.16.5.4", True), ("192.168.1.1", True), ("127.0.0.1", True),
     ("54.123.45.67", False), ("8.8.8.8", False), ("fd00::1", True), ("nonsense", False)],
)  # fmt: skip
def test_is_private_ip(value: str, expected: bool) -> None:
    assert is_private_ip(value) is expected


def test_public_ip_detection_error_is_an_exception_of_the_kits_tree() -> None:
    assert issubclass(PublicIPDetectionError, RolloutError)
    assert str(PublicIPDetectionError("x")) == "x"


# --------------------------------------------------------------------------- detect_public_ip

AWS_TOKEN = "/latest/api/token"
AWS_IP = "/latest/meta-data/public-ipv4"
GCP_IP = "/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip"
AZURE_IP = "/metadata/instance/network/interface/0/ipv4/ipAddress/0/publicIpAddress"
SERVICES = [("one", "http://ip-one.test/"), ("two", "http://ip-two.test/ip")]


class Endpoints:
    """Every endpoint detect_public_ip asks, behind MockTransport: answers by URL (404 for any
    other), every request kept; an endpoint in ``hang`` never answers."""

    def __init__(self, answers: dict[str, httpx.Response], hang: frozenset[str] = frozenset()):
        self.answers = answers
        self.hang = hang
        self.requests: list[httpx.Request] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        url = str(request.url.copy_with(query=None))
        if url in self.hang:
            await asyncio.Event().wait()  # until cancelled
        return self.answers.get(url, httpx.Response(404))

    def detect(self, **options: object) -> str:
        return detect_public_ip(
            metadata_url="http://metadata.test",
            external_services=SERVICES,
            transport=httpx.MockTransport(self.handle),
            **options,  # type: ignore[arg-type]
        )

    def asked(self) -> list[str]:
        return [f"{r.method} {r.url.host}{r.url.path}" for r in self.requests]


def text(body: str, code: int = 200) -> httpx.Response:
    return httpx.Response(code, text=body)


def test_the_defaults_are_v1s_endpoints() -> None:
    assert METADATA_URL == "http://169.254.169.254"
    assert EXTERNAL_SERVICES == (
        ("checkip.amazonaws.com", "https://checkip.amazonaws.com"),
        ("ipify", "https://api.ipify.org"),
        ("icanhazip", "https://icanhazip.com"),
        ("ifconfig.me", "https://ifconfig.me/ip"),
    )


def test_aws_imdsv2_token_then_address() -> None:
    endpoints = Endpoints(
        {
            "http://metadata.test" + AWS_TOKEN: text("tok-1"),
            "http://metadata.test" + AWS_IP: text(" 54.1.2.3\n"),
        }
    )
    assert endpoints.detect() == "54.1.2.3"
    token = next(r for r in endpoints.requests if r.url.path == AWS_TOKEN)
    assert token.method == "PUT"
    assert token.headers["x-aws-ec2-metadata-token-ttl-seconds"] == "60"
    address = next(r for r in endpoints.requests if r.url.path == AWS_IP)
    assert address.method == "GET"
    assert address.headers["x-aws-ec2-metadata-token"] == "tok-1"
    # Cloud metadata answered: no external service was asked.
    assert not any(r.url.host.startswith("ip-") for r in endpoints.requests)


def test_gcp_and_azure_are_asked_with_their_headers() -> None:
    endpoints = Endpoints({"http://metadata.test" + GCP_IP: text("35.1.1.1")})
    assert endpoints.detect() == "35.1.1.1"
    gcp = next(r for r in endpoints.requests if r.url.path == GCP_IP)
    assert gcp.headers["metadata-flavor"] == "Google"

    endpoints = Endpoints({"http://metadata.test" + AZURE_IP: text("20.1.1.1")})
    assert endpoints.detect() == "20.1.1.1"
    azure = next(r for r in endpoints.requests if r.url.path == AZURE_IP)
    assert azure.headers["metadata"] == "true"
    assert dict(azure.url.params) == {"api-version": "2021-02-01", "format": "text"}


def test_no_cloud_address_falls_back_to_the_external_services() -> None:
    endpoints = Endpoints(
        {
            "http://metadata.test" + AWS_TOKEN: text("tok"),
            # AWS: 404 means "no public address"; GCP: not an address; Azure: 404 (default).
            "http://metadata.test" + GCP_IP: text("<html>nope</html>"),
            "http://ip-one.test/": text("not an ip"),
            "http://ip-two.test/ip": text("203.0.113.9\n"),
        }
    )
    assert endpoints.detect() == "203.0.113.9"
    asked = endpoints.asked()
    cloud = [i for i, a in enumerate(asked) if "metadata.test" in a]
    external = [i for i, a in enumerate(asked) if "ip-" in a]
    assert max(cloud) < min(external)  # the cloud step ends before the external one starts
    assert sorted(asked[i] for i in external) == ["GET ip-one.test/", "GET ip-two.test/ip"]


def test_nothing_found_raises() -> None:
    endpoints = Endpoints({"http://ip-one.test/": text("oops", 500)})
    with pytest.raises(PublicIPDetectionError, match="public IP"):
        endpoints.detect()
    assert len(endpoints.requests) == 5  # AWS token, GCP, Azure, two services


def test_a_transport_failure_is_only_a_missing_answer() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        if request.url.host == "ip-two.test":
            return text("198.51.100.4")
        raise httpx.ConnectError("refused", request=request)

    address = detect_public_ip(
        metadata_url="http://metadata.test",
        external_services=SERVICES,
        transport=httpx.MockTransport(refuse),
    )
    assert address == "198.51.100.4"


def test_endpoints_that_never_answer_are_cut_off_at_the_deadline() -> None:
    everything = {"http://metadata.test" + p for p in (AWS_TOKEN, GCP_IP, AZURE_IP)}
    endpoints = Endpoints({}, hang=frozenset(everything | {url for _, url in SERVICES}))
    started = time.monotonic()
    with pytest.raises(PublicIPDetectionError):
        endpoints.detect(timeout=0.3)
    assert time.monotonic() - started < 3.0
    # Only the cloud step ran: its share took the whole deadline.
    assert all("metadata.test" in a for a in endpoints.asked())


def test_a_hanging_service_does_not_hold_back_one_that_answers() -> None:
    endpoints = Endpoints(
        {"http://ip-two.test/ip": text("192.0.2.8")}, hang=frozenset({"http://ip-one.test/"})
    )
    assert endpoints.detect(timeout=30.0) == "192.0.2.8"


async def test_called_on_a_running_loop_it_runs_on_a_thread_of_its_own() -> None:
    endpoints = Endpoints({"http://metadata.test" + GCP_IP: text("35.9.9.9")})
    assert endpoints.detect() == "35.9.9.9"
