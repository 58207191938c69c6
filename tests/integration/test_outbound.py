"""The outbound policy and the answer cap on the TrainGate client's real HTTP stack, against
servers on 127.0.0.1: what is refused is never contacted (the server counts the connections it
accepted), a name is checked at every resolution (through the resolver seam), and an answer
over the cap stops being read."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from rollout_sdk.errors import AnswerTooLarge, FailureCategory, OutboundRefused
from rollout_sdk.hosts import AllowedHost
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.telemetry import Metric
from rollout_sdk.traingate.client import TrainGateClient
from rollout_sdk.traingate.outbound import OutboundPolicy, Reach

from .test_transport import BODY, FakeSleep, answer, completion, wire_server

pytestmark = pytest.mark.integration

CAP = 64 * 1024


class MapResolver(AbstractResolver):
    """Answers each name from a script: the n-th lookup of a name gets its n-th address (the
    last one again after that), so a name can re-resolve elsewhere."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        seen = self.lookups.count(host)
        self.lookups.append(host)
        addresses = self.names[host]
        address = addresses[min(seen, len(addresses) - 1)]
        kind = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [
            ResolveResult(hostname=host, host=address, port=port, family=kind, proto=0, flags=0)
        ]

    async def close(self) -> None:
        pass


class Counter:
    """Counts what the client's telemetry counts (the alarm's metric among them)."""

    def __init__(self) -> None:
        self.counts: dict[Metric, float] = {}

    def count(self, metric: Metric, value: float = 1, /, **_: str) -> None:
        self.counts[metric] = self.counts.get(metric, 0) + value

    def observe(self, metric: Metric, value: float, /, **_: str) -> None:
        pass

    def span(self, name: Any, *, rollout_id: str) -> Any:
        import contextlib

        return contextlib.nullcontext()


def gate(
    policy: OutboundPolicy, sleep: FakeSleep, telemetry: Any = None, resolver: Any = None
) -> TrainGateClient:
    from rollout_sdk.traingate.transport import AiohttpTransport

    return TrainGateClient(
        RolloutClientSettings(max_retries=3, complete_rollout_retries=2),
        policy=policy,
        # The kit's own transport, as the client builds it, with the resolver seam when given.
        transport=AiohttpTransport(policy=policy, resolver=resolver),
        sleep=sleep,
        **({"telemetry": telemetry} if telemetry is not None else {}),
    )


def response() -> RolloutResponse:
    return RolloutResponse(rollout_id="r", status=RolloutStatus.COMPLETED)


async def ok(_: int) -> bytes:
    return answer(completion())


async def test_on_lambda_a_loopback_traingate_is_refused_before_any_connection() -> None:
    async with wire_server(ok) as (server, url):
        sleep, counter = FakeSleep(), Counter()
        client = gate(OutboundPolicy(reach=Reach.PUBLIC), sleep, counter)
        with pytest.raises(OutboundRefused, match="public addresses") as refused:
            await client.chat(url, BODY, api_key="secret")
        assert refused.value.category is FailureCategory.OUTBOUND_REFUSED
        delivery = await client.complete_rollout(url, response(), api_key="secret")
        await client.aclose()
    assert server.connections == []  # nothing was sent, not even a connection opened
    assert sleep.calls == []  # not retried
    assert not delivery.delivered and delivery.final and delivery.attempts == 0
    assert isinstance(delivery.ended_by, OutboundRefused)
    assert counter.counts[Metric.OUTBOUND_REFUSED] == 2


async def test_a_name_that_resolves_to_loopback_is_refused_at_connect() -> None:
    async with wire_server(ok) as (server, url):
        port = url.rsplit(":", 1)[1]
        names = MapResolver({"traingate.test": ["127.0.0.1"]})
        client = gate(OutboundPolicy(reach=Reach.PUBLIC), FakeSleep(), resolver=names)
        with pytest.raises(OutboundRefused, match=re.escape("resolves to 127.0.0.1")):
            await client.chat(f"http://traingate.test:{port}", BODY, api_key="secret")
        await client.aclose()
    assert names.lookups == ["traingate.test"]
    assert server.connections == []


async def test_a_name_that_re_resolves_inside_the_network_is_not_contacted() -> None:
    # Locally loopback is allowed, link-local (cloud metadata) never: the first lookup passes,
    # the second, after the pool was closed, points at 169.254.169.254 and is refused.
    async with wire_server(ok) as (server, url):
        port = url.rsplit(":", 1)[1]
        names = MapResolver({"traingate.test": ["127.0.0.1", "169.254.169.254"]})
        client = gate(OutboundPolicy(reach=Reach.PRIVATE), FakeSleep(), resolver=names)
        first = await client.chat(f"http://traingate.test:{port}", BODY, api_key="secret")
        assert first.choices
        await client.transport.aclose()  # a new pool resolves again
        with pytest.raises(OutboundRefused, match=re.escape("169.254.169.254")):
            await client.chat(f"http://traingate.test:{port}", BODY, api_key="secret")
        await client.aclose()
    assert names.lookups == ["traingate.test", "traingate.test"]
    assert server.requests == 1


async def test_a_name_with_any_refused_address_is_refused_whole() -> None:
    class Both(MapResolver):
        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return [
                ResolveResult(
                    hostname=host, host=a, port=port, family=socket.AF_INET, proto=0, flags=0
                )
                for a in ("127.0.0.1", "10.0.0.7")
            ]

    async with wire_server(ok) as (server, url):
        port = url.rsplit(":", 1)[1]
        policy = OutboundPolicy(reach=Reach.PUBLIC)
        client = gate(policy, FakeSleep(), resolver=Both({}))
        with pytest.raises(OutboundRefused):
            await client.chat(f"http://traingate.test:{port}", BODY, api_key=None)
        await client.aclose()
    assert server.connections == []


async def test_a_host_named_in_the_allowlist_is_called_at_its_private_address() -> None:
    async with wire_server(ok) as (server, url):
        port = int(url.rsplit(":", 1)[1])
        names = MapResolver({"traingate.internal": ["127.0.0.1"]})
        named = OutboundPolicy(
            reach=Reach.PUBLIC, allowed=(AllowedHost("traingate.internal", port),)
        )
        client = gate(named, FakeSleep(), resolver=names)
        result = await client.chat(f"http://traingate.internal:{port}", BODY, api_key=None)
        other_port = OutboundPolicy(
            reach=Reach.PUBLIC, allowed=(AllowedHost("traingate.internal", port + 1),)
        )
        refused = gate(other_port, FakeSleep(), resolver=names)
        with pytest.raises(OutboundRefused, match="allowed hosts"):
            await refused.chat(f"http://traingate.internal:{port}", BODY, api_key=None)
        await client.aclose()
        await refused.aclose()
    assert result.choices
    assert server.requests == 1


def _big_completion(size: int) -> dict[str, Any]:
    body = completion()
    body["choices"][0]["message"]["content"] = "x" * size
    return body


async def test_an_answer_over_the_cap_stops_the_call_and_is_not_retried() -> None:
    async def huge(_: int) -> bytes:
        return answer(_big_completion(4 * CAP))

    async with wire_server(huge) as (server, url):
        sleep = FakeSleep()
        client = gate(OutboundPolicy(max_answer_bytes=CAP), sleep)
        with pytest.raises(AnswerTooLarge, match="ROLLOUT_SDK_MAX_ANSWER_BYTES") as too_large:
            await client.chat(url, BODY, api_key=None)
        await client.aclose()
    assert too_large.value.category is FailureCategory.ANSWER_TOO_LARGE
    assert server.requests == 1 and sleep.calls == []


async def test_the_cap_counts_decoded_bytes_so_a_gzip_bomb_is_stopped() -> None:
    padded = _big_completion(64 * CAP)  # 4 MiB of content, a few kB gzipped

    async def bomb(_: int) -> bytes:
        return answer(padded, gzipped=True)

    assert len(gzip.compress(json.dumps(padded).encode())) < CAP
    async with wire_server(bomb) as (_, url):
        client = gate(OutboundPolicy(max_answer_bytes=CAP), FakeSleep())
        with pytest.raises(AnswerTooLarge):
            await client.chat(url, BODY, api_key=None)
        await client.aclose()


async def test_a_declared_length_over_the_cap_is_refused_before_reading_and_chunks_are_counted() -> (
    None
):
    async def declares(_: int) -> bytes:
        # Declares more than the cap and sends only the head: refused without waiting for it.
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n\r\n"

    async def chunked(_: int) -> bytes:
        chunk = b"x" * 8192
        parts = b"".join(b"2000\r\n" + chunk + b"\r\n" for _ in range(2 * CAP // 8192))
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + parts + b"0\r\n\r\n"

    for script in (declares, chunked):
        async with wire_server(script) as (_, url):
            client = gate(OutboundPolicy(max_answer_bytes=CAP), FakeSleep())
            with pytest.raises(AnswerTooLarge):
                await asyncio.wait_for(client.chat(url, BODY, api_key=None), timeout=20)
            await client.aclose()


async def test_a_callback_answered_over_the_cap_is_final() -> None:
    async def huge(_: int) -> bytes:
        return answer({"detail": "y" * (2 * CAP)})

    async with wire_server(huge) as (server, url):
        client = gate(OutboundPolicy(max_answer_bytes=CAP), FakeSleep())
        delivery = await client.complete_rollout(url, response(), api_key=None)
        await client.aclose()
    assert not delivery.delivered and delivery.final
    assert isinstance(delivery.ended_by, AnswerTooLarge)
    assert server.requests == 1


async def test_an_error_body_quoted_in_a_message_is_short_and_printable() -> None:
    async def refuses(_: int) -> bytes:
        body = b"\x1b[2Jno\r\nway" + b"z" * 5000
        return (
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )

    async with wire_server(refuses) as (_, url):
        client = gate(OutboundPolicy(), FakeSleep())
        delivery = await client.complete_rollout(url, response(), api_key=None)
        await client.aclose()
    assert delivery.error is not None
    assert (
        "\x1b" not in delivery.error and "\r" not in delivery.error and "\n" not in delivery.error
    )
    assert "\\x1b[2Jno\\x0d\\x0away" in delivery.error
    assert len(delivery.error) < 400
