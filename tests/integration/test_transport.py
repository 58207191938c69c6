"""The TrainGate client on its real HTTP stack (aiohttp under httpx's seam), against servers on
127.0.0.1 that misbehave on the wire: a pooled connection closed under the client, a connection
dropped before any answer, a refused port, an answer that never comes, a gzip body; and
``rollout-sdk test``'s forwarder, which sends through the same helper, against an endpoint that
closes a pooled connection under it."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from rollout_sdk.errors import OsmosisTimeoutError, OsmosisTransportError, OsmosisValidationError
from rollout_sdk.local.forward import Endpoint, ForwardingTrainGate
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.traingate.client import CHAT_PATH, TrainGateClient
from rollout_sdk.traingate.transport import AiohttpTransport

pytestmark = pytest.mark.integration


class FakeSleep:
    """Records every backoff the client asks for, and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def completion() -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}
        ],
    }


BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

#: What the server does with the n-th request (0-based) on a connection: an answer's bytes to
#: send, or None to close the connection without answering.
Script = Callable[[int], Awaitable[bytes | None]]


def answer(payload: dict[str, Any], *, gzipped: bool = False) -> bytes:
    body = json.dumps(payload).encode()
    extra = b""
    if gzipped:
        body, extra = gzip.compress(body), b"Content-Encoding: gzip\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
    return head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


class WireServer:
    """An HTTP/1.1 server on asyncio streams that follows a :data:`Script` per connection and
    counts the requests it read in full (each connection's requests, in order), keeping each
    request's head and body."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections: list[int] = []
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(self.connections)
        self.connections.append(0)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                self.bodies.append(await reader.readexactly(length))
                n = self.connections[index]
                self.connections[index] += 1
                reply = await self.script(n)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @property
    def requests(self) -> int:
        return sum(self.connections)


@contextlib.asynccontextmanager
async def wire_server(script: Script) -> AsyncIterator[tuple[WireServer, str]]:
    server = WireServer(script)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        listener.close()
        await listener.wait_closed()


def client(sleep: FakeSleep, **settings: Any) -> TrainGateClient:
    return TrainGateClient(RolloutClientSettings(**settings), sleep=sleep)


async def test_a_pooled_connection_the_server_closed_is_resent_once_on_a_new_one() -> None:
    # The second request on each connection is read, then the connection is closed unanswered:
    # what a client sees when the server closed an idle connection as the request went out.
    async def script(n: int) -> bytes | None:
        return answer(completion()) if n == 0 else None

    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = client(sleep, max_retries=0)
        await gate.chat(url, BODY, api_key="k")
        await gate.chat(url, BODY, api_key="k")
        await gate.aclose()
    # Connection 1: the first call, then the second call's lost copy; connection 2: its re-send.
    assert server.connections == [2, 1]
    assert sleep.calls == []


async def test_the_forwarder_resends_a_call_whose_pooled_connection_the_endpoint_closed() -> None:
    # The endpoint answers the first request on each connection and closes the connection when
    # the second arrives: the forwarder's second chat call went out on a pooled connection the
    # endpoint had closed, and is sent once more at once on a new one.
    async def script(n: int) -> bytes | None:
        return answer(completion()) if n == 0 else None

    transport = AiohttpTransport()
    async with wire_server(script) as (server, url):
        forwarder = ForwardingTrainGate(
            Endpoint(base_url=f"{url}/v1", model="m", timeout=10.0),
            callback_key="cb",
            transport=transport,
        )
        try:
            first = await forwarder.forward(BODY, [], {})
            second = await forwarder.forward(BODY, [], {})
        finally:
            await transport.aclose()
    assert first == completion()
    assert second == completion()
    assert server.connections == [2, 1]
    assert server.heads[-1].decode().lower().startswith("post /v1/chat/completions http/1.1")


async def test_a_new_connection_dropped_unanswered_uses_the_retries() -> None:
    async def script(n: int) -> bytes | None:
        return None

    sleep = FakeSleep()
    async with wire_server(script) as (server, url):
        gate = client(sleep, max_retries=2)
        with pytest.raises(OsmosisTransportError, match="could not reach"):
            await gate.chat(url, BODY, api_key="k")
        await gate.aclose()
    # Never a reused connection, so no immediate re-send: one request per attempt.
    assert server.connections == [1, 1, 1]
    assert len(sleep.calls) == 2


async def test_a_refused_connection_is_a_transport_error() -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    gate = client(FakeSleep(), max_retries=1)
    with pytest.raises(OsmosisTransportError, match="ConnectError"):
        await gate.chat(f"http://127.0.0.1:{port}", BODY, api_key="k")
    await gate.aclose()


async def test_an_answer_that_never_comes_is_a_timeout() -> None:
    release = asyncio.Event()

    async def script(n: int) -> bytes | None:
        await release.wait()
        return None

    async with wire_server(script) as (server, url):
        gate = client(FakeSleep(), max_retries=0, timeout_seconds=0.3)
        try:
            with pytest.raises(OsmosisTimeoutError, match="ReadTimeout"):
                await gate.chat(url, BODY, api_key="k")
        finally:
            release.set()
            await gate.aclose()
    assert server.requests == 1


async def test_a_gzip_answer_is_decoded_and_the_headers_are_sent() -> None:
    async def script(n: int) -> bytes | None:
        return answer(completion(), gzipped=True)

    async with wire_server(script) as (server, url):
        gate = client(FakeSleep())
        result = await gate.chat(url, BODY, api_key="secret")
        await gate.aclose()
    assert result.choices[0].message["content"]
    head = server.heads[0].decode().lower()
    assert head.startswith(f"post {CHAT_PATH} http/1.1")
    assert "authorization: bearer secret" in head
    assert "content-type: application/json" in head


async def test_a_redirect_is_not_followed_by_the_chat_call_or_the_callback() -> None:
    # A TrainGate (or whatever a server_url names) answering 307 to elsewhere: the client takes
    # the answer as it is and never sends the request, or the callback key, to the Location.
    async def elsewhere_script(n: int) -> bytes | None:
        return answer(completion())

    async with wire_server(elsewhere_script) as (elsewhere, target):
        moved = (
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}/admin\r\n"
            "Content-Length: 0\r\n\r\n"
        ).encode()

        async def script(n: int) -> bytes | None:
            return moved

        async with wire_server(script) as (server, url):
            gate = client(FakeSleep(), max_retries=0, complete_rollout_retries=0)
            with pytest.raises(OsmosisValidationError, match="307"):
                await gate.chat(url, BODY, api_key="k")
            delivery = await gate.complete_rollout(
                url, RolloutResponse(rollout_id="r", status=RolloutStatus.ERROR), api_key="k"
            )
            await gate.aclose()
    assert (delivery.delivered, delivery.status_code) == (False, 307)
    assert server.requests == 2
    assert elsewhere.requests == 0
