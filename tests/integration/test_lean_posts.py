"""The TrainGate client's two paths under ``_send`` behave the same on the wire, against servers on
127.0.0.1: the lean one (the kit's ``AiohttpTransport``, posted to through its ``post``, no httpx
object built) and the httpx seam (an ``httpx.Request`` through any other transport: here the
kit's own ``handle_async_request`` behind a plain ``httpx.AsyncBaseTransport``, and httpx's own
pool where the kit's policy, cap and stale-connection mark do not apply).

Each test runs every path it names against the same script and the same expectations: status
and body, ``Retry-After``, a final 4xx, the single re-send on a pooled connection the server
closed, the answer cap, a refused literal address; and the lean path is shown to build no httpx
``URL``, ``Request``, ``Response`` or ``Headers``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from rollout_sdk.errors import (
    AnswerTooLarge,
    OsmosisTransportError,
    OsmosisValidationError,
    OutboundRefused,
)
from rollout_sdk.protocol import CompletionsResponse, RolloutResponse, RolloutStatus
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH, TrainGateClient
from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
from rollout_sdk.traingate.transport import AiohttpTransport

from .test_transport import BODY, FakeSleep, answer, completion, wire_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

#: The lean path, the kit's transport behind httpx's seam, httpx's own pool.
LEAN, SEAM, HTTPX = "lean", "seam", "httpx"
#: The paths that carry the kit's policy, answer cap and stale-connection mark.
KIT_PATHS = [LEAN, SEAM]
ALL_PATHS = [LEAN, SEAM, HTTPX]

CAP = 64 * 1024


class Seam(httpx.AsyncBaseTransport):
    """The kit's transport reached only through httpx's seam: not an ``AiohttpTransport``, so
    the client builds an ``httpx.Request`` and the kit's ``handle_async_request`` answers it.
    Counts the requests it was handed, so a test can tell the seam was the path taken."""

    def __init__(self, inner: AiohttpTransport) -> None:
        self.inner = inner
        self.handled = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.handled += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def make(
    path: str, sleep: FakeSleep, *, policy: OutboundPolicy | None = None, **settings: Any
) -> TrainGateClient:
    """A client on ``path``, its backoff without jitter (half the capped delay)."""
    policy = policy if policy is not None else OutboundPolicy()
    transport: httpx.AsyncBaseTransport
    if path == LEAN:
        transport = AiohttpTransport(policy=policy)
    elif path == SEAM:
        transport = Seam(AiohttpTransport(policy=policy))
    else:
        transport = httpx.AsyncHTTPTransport()
    return TrainGateClient(
        RolloutClientSettings(**settings),
        policy=policy,
        transport=transport,
        sleep=sleep,
        jitter=lambda: 0.0,
    )


def reply(status: str, body: bytes = b"", *headers: str) -> bytes:
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{h}\r\n" for h in headers)
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def header(head: bytes, name: str) -> str | None:
    """The value of header ``name`` in a request head, else None."""
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def in_order(*replies: bytes) -> Callable[[int], Any]:
    """A script answering the server's requests in arrival order, whatever their connection
    (the last reply repeats)."""
    seen: list[int] = []

    async def script(_: int) -> bytes:
        seen.append(1)
        return replies[min(len(seen), len(replies)) - 1]

    return script


def final_response() -> RolloutResponse:
    return RolloutResponse(rollout_id="r-1", status=RolloutStatus.COMPLETED, reward=1.0)


@pytest.mark.parametrize("path", ALL_PATHS)
async def test_status_and_body_and_what_is_sent_are_the_same_on_every_path(path: str) -> None:
    script = in_order(answer(completion()), reply("202 Accepted", b'{"ok": true}'))
    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = make(path, sleep)
        result = await gate.chat(url, BODY, api_key="secret")
        delivery = await gate.complete_rollout(url, final_response(), api_key="secret")
        seam = gate.transport.handled if isinstance(gate.transport, Seam) else None
        await gate.aclose()
    assert result == CompletionsResponse.model_validate(completion())
    assert (delivery.delivered, delivery.final, delivery.attempts) == (True, True, 1)
    assert delivery.status_code == 202
    chat_head, callback_head = server.heads
    assert chat_head.startswith(f"POST {CHAT_PATH} HTTP/1.1\r\n".encode())
    assert callback_head.startswith(f"POST {COMPLETED_PATH} HTTP/1.1\r\n".encode())
    for head in server.heads:
        assert header(head, "authorization") == "Bearer secret"
        assert header(head, "content-type") == "application/json"
        assert header(head, "host") == url.removeprefix("http://")
    chat_body, callback_body = server.bodies
    assert json.loads(chat_body) == BODY
    assert json.loads(callback_body) == final_response().model_dump(mode="json")
    assert sleep.calls == []
    if path == SEAM:
        assert seam == 2  # both calls went through httpx's seam


@pytest.mark.parametrize("path", ALL_PATHS)
async def test_retry_after_is_honoured_on_every_path(path: str) -> None:
    busy = reply("503 Service Unavailable", b"busy", "Retry-After: 7")
    script = in_order(busy, answer(completion()), busy, reply("200 OK", b"{}"))
    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = make(path, sleep, retry_base_delay=1.0, max_retries=3, complete_rollout_retries=3)
        result = await gate.chat(url, BODY, api_key=None)
        delivery = await gate.complete_rollout(url, final_response(), api_key=None)
        await gate.aclose()
    assert result.choices[0].message["content"] == "4"
    assert (delivery.delivered, delivery.attempts) == (True, 2)
    # Without jitter the backoff is 0.5 s: each wait is the server's 7 s.
    assert sleep.calls == [7.0, 7.0]
    assert server.requests == 4


@pytest.mark.parametrize("path", ALL_PATHS)
async def test_a_4xx_is_final_on_every_path(path: str) -> None:
    script = in_order(
        reply("400 Bad Request", b"no such model"), reply("404 Not Found", b"unknown rollout")
    )
    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = make(path, sleep, max_retries=3, complete_rollout_retries=3)
        with pytest.raises(OsmosisValidationError, match="no such model") as refused:
            await gate.chat(url, BODY, api_key=None)
        delivery = await gate.complete_rollout(url, final_response(), api_key=None)
        await gate.aclose()
    assert refused.value.status_code == 400
    assert (delivery.delivered, delivery.final, delivery.attempts) == (False, True, 1)
    assert delivery.status_code == 404
    assert delivery.error is not None and "unknown rollout" in delivery.error
    assert server.requests == 2
    assert sleep.calls == []


@pytest.mark.parametrize("path", KIT_PATHS)
async def test_a_pooled_connection_the_server_closed_is_resent_once_on_every_path(
    path: str,
) -> None:
    # The second request on each connection is read, then the connection is closed unanswered:
    # the server had closed the idle kept-alive connection as the request went out.
    async def script(n: int) -> bytes | None:
        return answer(completion()) if n == 0 else None

    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = make(path, sleep, max_retries=0)
        await gate.chat(url, BODY, api_key="k")
        second = await gate.chat(url, BODY, api_key="k")
        await gate.aclose()
    assert second.choices
    # Connection 1: the first call, then the second call's lost copy; connection 2: its re-send,
    # at once and not counted as a retry (there are none to count).
    assert server.connections == [2, 1]
    assert sleep.calls == []


@pytest.mark.parametrize("path", KIT_PATHS)
async def test_the_stale_connection_re_send_happens_once_only_on_every_path(path: str) -> None:
    # Two connections in the pool, each closed by the server at its next request: the call goes
    # out on one, is re-sent on the other, and the second stale failure is the attempt's end.
    both = asyncio.Event()
    first_requests: list[int] = []

    async def script(n: int) -> bytes | None:
        if n > 0:
            return None
        first_requests.append(n)
        if len(first_requests) == 2:
            both.set()
        await both.wait()  # both connections open before either answers
        return answer(completion())

    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = make(path, sleep, max_retries=0)
        await asyncio.gather(gate.chat(url, BODY, api_key="k"), gate.chat(url, BODY, api_key="k"))
        assert server.connections == [1, 1]
        with pytest.raises(OsmosisTransportError, match="StaleConnectionError"):
            await gate.chat(url, BODY, api_key="k")
        await gate.aclose()
    assert server.connections == [2, 2]  # one re-send, on the other pooled connection; no third
    assert sleep.calls == []


@pytest.mark.parametrize("path", KIT_PATHS)
async def test_the_answer_cap_holds_on_every_path(path: str) -> None:
    big = completion()
    big["choices"][0]["message"]["content"] = "x" * (4 * CAP)
    script = in_order(answer(big), reply("200 OK", json.dumps({"detail": "y" * 2 * CAP}).encode()))
    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = make(path, sleep, policy=OutboundPolicy(max_answer_bytes=CAP), max_retries=3)
        with pytest.raises(AnswerTooLarge, match="ROLLOUT_SDK_MAX_ANSWER_BYTES"):
            await gate.chat(url, BODY, api_key=None)
        delivery = await gate.complete_rollout(url, final_response(), api_key=None)
        await gate.aclose()
    assert (delivery.delivered, delivery.final, delivery.attempts) == (False, True, 1)
    assert isinstance(delivery.ended_by, AnswerTooLarge)
    assert server.requests == 2  # each read once, neither retried
    assert sleep.calls == []


@pytest.mark.parametrize("path", KIT_PATHS)
async def test_a_refused_literal_address_is_never_contacted_on_every_path(path: str) -> None:
    sleep = FakeSleep()
    async with wire_server(in_order(answer(completion()))) as (server, url):
        gate = make(path, sleep, policy=OutboundPolicy(reach=Reach.PUBLIC))
        with pytest.raises(OutboundRefused, match=r"'127\.0\.0\.1' is a loopback address"):
            await gate.chat(url, BODY, api_key="secret")
        delivery = await gate.complete_rollout(url, final_response(), api_key="secret")
        await gate.aclose()
    assert server.connections == []  # nothing sent, no connection opened
    assert (delivery.delivered, delivery.final, delivery.attempts) == (False, True, 0)
    assert isinstance(delivery.ended_by, OutboundRefused)
    assert sleep.calls == []


async def test_the_lean_path_builds_no_httpx_object(monkeypatch: pytest.MonkeyPatch) -> None:
    def built(self: object, *_: Any, **__: Any) -> None:
        raise AssertionError(f"httpx.{type(self).__name__} built")

    response = final_response()
    script = in_order(answer(completion()), reply("200 OK", b"{}"))
    async with wire_server(script) as (server, url):
        # The client's default transport: the kit's, and so the lean path.
        lean = TrainGateClient(RolloutClientSettings(max_retries=0, complete_rollout_retries=0))
        seam = make(SEAM, FakeSleep(), max_retries=0)
        for model in (httpx.URL, httpx.Request, httpx.Response, httpx.Headers):
            monkeypatch.setattr(model, "__init__", built)
        try:
            result = await lean.chat(url, BODY, api_key="k")
            delivery = await lean.complete_rollout(url, response, api_key="k")
            # The same patch stops the httpx path at its first httpx object: it would have
            # caught one on the lean path.
            with pytest.raises(AssertionError, match=r"httpx\.(URL|Request) built"):
                await seam.chat(url, BODY, api_key="k")
        finally:
            monkeypatch.undo()
            await lean.aclose()
            await seam.aclose()
    assert result.choices[0].message["content"] == "4"
    assert delivery.delivered
    assert server.requests == 2
