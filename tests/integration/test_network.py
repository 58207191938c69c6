"""detect_public_ip on the kit's real HTTP stack (aiohttp under httpx's seam), against metadata
and "what is my IP" endpoints served on 127.0.0.1: nothing leaves the machine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rollout_sdk.errors import PublicIPDetectionError
from rollout_sdk.network import detect_public_ip
from rollout_sdk.testing.threads import ServerThread

pytestmark = pytest.mark.integration

AWS_TOKEN = "/latest/api/token"
AWS_IP = "/latest/meta-data/public-ipv4"


class Endpoints:
    """A raw ASGI app: ``answers`` maps a path to (status, text), anything else is a 404; a path
    in ``hang`` answers only once :meth:`release` is called. Keeps (method, path, headers)."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str]] = {}
        self.hang: set[str] = set()
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._released: asyncio.Event | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.seen.append((scope["method"], scope["path"], headers))
        if scope["path"] in self.hang:
            self._loop = asyncio.get_running_loop()
            self._released = self._released or asyncio.Event()
            await self._released.wait()
        status, body = self.answers.get(scope["path"], (404, "not found"))
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body.encode()})

    def release(self) -> None:
        if self._loop is not None and self._released is not None:
            self._loop.call_soon_threadsafe(self._released.set)


@pytest.fixture
def endpoints() -> Iterator[tuple[Endpoints, str]]:
    app = Endpoints()
    with ServerThread(app) as server:
        try:
            yield app, server.url
        finally:
            app.release()


def test_aws_metadata_over_loopback(endpoints: tuple[Endpoints, str]) -> None:
    app, url = endpoints
    app.answers = {AWS_TOKEN: (200, "tok-9"), AWS_IP: (200, "54.9.8.7\n")}
    assert detect_public_ip(metadata_url=url, external_services=[]) == "54.9.8.7"
    methods = {(method, path) for method, path, _ in app.seen}
    assert ("PUT", AWS_TOKEN) in methods
    assert ("GET", AWS_IP) in methods
    (token_get,) = [h for m, p, h in app.seen if p == AWS_IP]
    assert token_get["x-aws-ec2-metadata-token"] == "tok-9"


def test_external_service_over_loopback_when_no_cloud_knows(
    endpoints: tuple[Endpoints, str],
) -> None:
    app, url = endpoints
    app.answers = {"/ip": (200, "203.0.113.50")}
    services = [("bad", url + "/nothing"), ("good", url + "/ip")]
    assert detect_public_ip(metadata_url=url, external_services=services) == "203.0.113.50"


def test_nothing_found_over_loopback_raises(endpoints: tuple[Endpoints, str]) -> None:
    app, url = endpoints
    with pytest.raises(PublicIPDetectionError):
        detect_public_ip(metadata_url=url, external_services=[("none", url + "/ip")])
    assert {p for _, p, _ in app.seen} >= {AWS_TOKEN, "/ip"}


def test_a_refused_port_is_no_answer() -> None:
    # A port nothing listens on (the server's own, after it stopped).
    with ServerThread(Endpoints()) as server:
        url = server.url
    with pytest.raises(PublicIPDetectionError):
        detect_public_ip(metadata_url=url, external_services=[("gone", url + "/ip")])


def test_a_silent_endpoint_is_cut_off_by_the_deadline(endpoints: tuple[Endpoints, str]) -> None:
    app, url = endpoints
    app.hang = {AWS_TOKEN, "/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/"
                "external-ip", "/metadata/instance/network/interface/0/ipv4/ipAddress/0/"
                "publicIpAddress"}  # fmt: skip
    timeout = 0.5
    started = time.monotonic()
    with pytest.raises(PublicIPDetectionError):
        detect_public_ip(metadata_url=url, external_services=[], timeout=timeout)
    elapsed = time.monotonic() - started
    # Ended by the deadline, not by an answer (a 404 or a refusal would end it at once)...
    assert elapsed >= timeout - 0.01
    assert elapsed < 5.0
    # ... and whatever reached the endpoints was left hanging. On a busy machine a request may
    # not even arrive before the deadline: silence all the same, so arrival is not required.
    assert {path for _, path, _ in app.seen} <= app.hang
