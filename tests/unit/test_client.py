"""TrainGateClient: retry rules, error translation, delivery results, one shared HTTP client."""

from __future__ import annotations

import contextlib
import email.utils
import math
import time
from contextlib import AbstractContextManager
from typing import Any

import httpx
import pytest

from rollout_sdk.errors import (
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
)
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.telemetry import Metric, Span
from rollout_sdk.traingate.client import (
    CHAT_PATH,
    COMPLETED_PATH,
    DeliveryResult,
    TrainGateClient,
    is_retryable_status,
    parse_retry_after,
)
from rollout_sdk.traingate.transport import (
    KEEPALIVE_EXPIRY_SECONDS,
    AiohttpTransport,
    StaleConnectionError,
)

from .support import TRAINGATE, FakeSleep, FakeTrainGate, Reply, completion, responses

CHAT_BODY: dict[str, Any] = {
    "model": "default",
    "messages": [{"role": "user", "content": "hi"}],
    "rollout_id": "rollout-1",
}


def make_client(
    gate: FakeTrainGate,
    sleep: FakeSleep,
    *,
    jitter: float = 0.0,
    **settings: Any,
) -> TrainGateClient:
    return TrainGateClient(
        RolloutClientSettings(**settings),
        transport=gate.transport,
        sleep=sleep,
        jitter=lambda: jitter,
    )


def final_response() -> RolloutResponse:
    return RolloutResponse(
        rollout_id="rollout-1",
        status=RolloutStatus.COMPLETED,
        final_messages=[{"role": "assistant", "content": "4"}],
        reward=1.0,
    )


# --------------------------------------------------------------------------- chat


async def test_chat_returns_the_completion_on_200() -> None:
    gate = FakeTrainGate()
    client = make_client(gate, FakeSleep())
    result = await client.chat(TRAINGATE, CHAT_BODY, api_key="cb-key")
    assert result.choices[0].message == {"role": "assistant", "content": "4"}
    assert result.usage is not None
    assert result.usage.total_tokens == 15
    assert [r.url for r in gate.requests] == [httpx.URL(TRAINGATE + CHAT_PATH)]
    assert gate.bodies(CHAT_PATH) == [CHAT_BODY]
    await client.aclose()


@pytest.mark.parametrize("code", [500, 502, 503, 408, 429])
async def test_chat_retries_retryable_status_then_succeeds(code: int) -> None:
    gate = FakeTrainGate(chat=responses(code, code, 200))
    sleep = FakeSleep()
    client = make_client(gate, sleep, max_retries=3)
    result = await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert result.choices[0].message["content"] == "4"
    assert len(gate.requests) == 3
    assert len(sleep.calls) == 2


@pytest.mark.parametrize("code", [500, 503, 408, 429])
async def test_chat_raises_server_error_after_max_retries(code: int) -> None:
    gate = FakeTrainGate(chat=responses(code))
    sleep = FakeSleep()
    client = make_client(gate, sleep, max_retries=2)
    with pytest.raises(OsmosisServerError) as caught:
        await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert caught.value.status_code == code
    assert len(gate.requests) == 3  # the first attempt and two retries
    assert len(sleep.calls) == 2  # no sleep after the last attempt


async def test_chat_with_zero_retries_sends_once() -> None:
    gate = FakeTrainGate(chat=responses(503))
    client = make_client(gate, FakeSleep(), max_retries=0)
    with pytest.raises(OsmosisServerError):
        await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert len(gate.requests) == 1


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (httpx.ConnectError("connection refused"), OsmosisTransportError),
        (httpx.RemoteProtocolError("peer closed connection"), OsmosisTransportError),
        (httpx.ReadTimeout("read timed out"), OsmosisTimeoutError),
        (httpx.ConnectTimeout("connect timed out"), OsmosisTimeoutError),
    ],
)
async def test_chat_transport_failures_are_retried_then_translated(
    failure: Exception, expected: type[Exception]
) -> None:
    gate = FakeTrainGate(chat=[failure])
    sleep = FakeSleep()
    client = make_client(gate, sleep, max_retries=3)
    with pytest.raises(expected) as caught:
        await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert len(gate.requests) == 4
    assert len(sleep.calls) == 3
    assert caught.value.__cause__ is failure
    # Nothing above the client sees an httpx exception.
    assert not isinstance(caught.value, httpx.HTTPError)


async def test_chat_recovers_from_a_transport_failure() -> None:
    gate = FakeTrainGate(
        chat=[httpx.ConnectError("refused"), httpx.Response(200, json=completion("ok"))]
    )
    client = make_client(gate, FakeSleep())
    result = await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert result.choices[0].message["content"] == "ok"
    assert len(gate.requests) == 2


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422])
async def test_chat_final_4xx_raises_validation_error_at_once(code: int) -> None:
    gate = FakeTrainGate(chat=[httpx.Response(code, text="nope")])
    sleep = FakeSleep()
    client = make_client(gate, sleep, max_retries=3)
    with pytest.raises(OsmosisValidationError) as caught:
        await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert caught.value.status_code == code
    assert len(gate.requests) == 1
    assert sleep.calls == []


async def test_chat_2xx_with_a_body_that_is_not_a_completion_is_a_server_error() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(200, text="<html>proxy</html>")])
    client = make_client(gate, FakeSleep())
    with pytest.raises(OsmosisServerError) as caught:
        await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert caught.value.status_code == 200


async def test_chat_usage_null_means_no_usage() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(200, json=completion(usage=None))])
    client = make_client(gate, FakeSleep())
    result = await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert result.usage is None
    assert result.choices[0].message["content"] == "4"


async def test_chat_usage_absent_and_null_token_lists() -> None:
    body = completion()
    del body["usage"]
    body["token_ids"] = None
    body["logprobs"] = None
    gate = FakeTrainGate(chat=[httpx.Response(200, json=body)])
    client = make_client(gate, FakeSleep())
    result = await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    assert result.usage is None
    assert result.token_ids == []
    assert result.logprobs == []


async def _sleeps_after(status: int, retry_after: str, **settings: Any) -> list[float]:
    """What the client sleeps before retrying a ``status`` answer carrying ``Retry-After``."""
    gate = FakeTrainGate(
        chat=[httpx.Response(status, headers={"Retry-After": retry_after}), *responses(200)]
    )
    sleep = FakeSleep()
    client = make_client(gate, sleep, **settings)
    await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    return sleep.calls


async def test_retry_after_seconds_is_honoured() -> None:
    sleeps = await _sleeps_after(429, "7", retry_base_delay=1.0, retry_max_delay=30.0)
    assert sleeps == [7.0]


async def test_retry_after_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    sleeps = await _sleeps_after(503, when, retry_base_delay=1.0)
    assert len(sleeps) == 1
    assert 115 <= sleeps[0] <= 121


async def test_retry_after_shorter_than_backoff_keeps_the_backoff() -> None:
    sleeps = await _sleeps_after(503, "0", jitter=1.0, retry_base_delay=2.0)
    assert sleeps == [2.0]


async def test_retry_after_is_capped_by_the_request_timeout() -> None:
    sleeps = await _sleeps_after(429, "86400", timeout_seconds=60.0)
    assert sleeps == [60.0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("12", 12.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: retry now
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date_relative_to_now() -> None:
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    base = email.utils.parsedate_to_datetime(date).timestamp()
    assert parse_retry_after(date, now=base - 42) == pytest.approx(42.0)


def test_backoff_is_exponential_capped_with_equal_jitter() -> None:
    settings = RolloutClientSettings(retry_base_delay=1.0, retry_max_delay=10.0)
    low = TrainGateClient(settings, jitter=lambda: 0.0)
    high = TrainGateClient(settings, jitter=lambda: 1.0)
    assert [low.backoff(a) for a in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert [high.backoff(a) for a in range(5)] == [1.0, 2.0, 4.0, 8.0, 10.0]


def test_backoff_with_real_jitter_stays_within_bounds_and_varies() -> None:
    client = TrainGateClient(RolloutClientSettings(retry_base_delay=1.0, retry_max_delay=30.0))
    for attempt in range(8):
        capped = min(2.0**attempt, 30.0)
        delays = [client.backoff(attempt) for _ in range(200)]
        assert all(capped / 2 <= d <= capped for d in delays)
        assert len(set(delays)) > 1  # jitter actually spreads retries


def test_backoff_never_below_retry_after() -> None:
    client = TrainGateClient(RolloutClientSettings(retry_base_delay=1.0), jitter=lambda: 0.5)
    assert client.backoff(0, retry_after=9.0) == 9.0
    assert client.backoff(0, retry_after=0.1) == 0.75


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(200, False), (400, False), (404, False), (408, True), (429, True), (500, True), (599, True)],
)
def test_is_retryable_status(code: int, retryable: bool) -> None:
    assert is_retryable_status(code) is retryable


# --------------------------------------------------------------------------- complete_rollout


async def _deliver(
    gate: FakeTrainGate, *, api_key: str | None = None, **settings: Any
) -> tuple[DeliveryResult, FakeSleep]:
    """The final response sent to ``gate`` by a client of ``settings``, and its sleeps."""
    sleep = FakeSleep()
    client = make_client(gate, sleep, **settings)
    return await client.complete_rollout(TRAINGATE, final_response(), api_key=api_key), sleep


@pytest.mark.parametrize("code", [200, 201, 202, 204])
async def test_complete_rollout_any_2xx_is_delivered_with_one_request(code: int) -> None:
    gate = FakeTrainGate(completed=[httpx.Response(code)])
    result, sleep = await _deliver(gate, api_key="cb-key")
    assert result.delivered is True
    assert result.final is True
    assert result.attempts == 1
    assert result.status_code == code
    assert len(gate.requests) == 1
    assert sleep.calls == []
    assert gate.bodies(COMPLETED_PATH) == [final_response().model_dump(mode="json")]


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 422])
async def test_complete_rollout_final_4xx_is_not_retried(code: int) -> None:
    gate = FakeTrainGate(completed=[httpx.Response(code, text="unknown rollout")])
    result, sleep = await _deliver(gate, complete_rollout_retries=3)
    assert result.delivered is False
    assert result.final is True
    assert result.attempts == 1
    assert result.status_code == code
    assert result.error is not None
    assert "unknown rollout" in result.error
    assert len(gate.requests) == 1
    assert sleep.calls == []


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(500),
        httpx.Response(408),
        httpx.Response(429),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
    ids=["500", "408", "429", "connect", "timeout"],
)
async def test_complete_rollout_retries_exhausted(reply: Reply) -> None:
    gate = FakeTrainGate(completed=[reply])
    result, sleep = await _deliver(gate, complete_rollout_retries=2)
    assert result.delivered is False
    assert result.final is False
    assert result.attempts == 3
    assert result.error
    assert len(gate.requests) == 3
    assert len(sleep.calls) == 2


async def test_complete_rollout_retry_then_2xx_is_delivered() -> None:
    gate = FakeTrainGate(
        completed=[httpx.Response(503, headers={"Retry-After": "4"}), httpx.Response(204)]
    )
    result, sleep = await _deliver(gate)
    assert (result.delivered, result.final, result.attempts) == (True, True, 2)
    assert sleep.calls == [4.0]
    bodies = gate.bodies(COMPLETED_PATH)
    assert bodies[0] == bodies[1]  # a re-send carries the identical body


async def test_callback_key_is_sent_as_bearer_on_both_calls() -> None:
    gate = FakeTrainGate()
    client = make_client(gate, FakeSleep())
    await client.chat(TRAINGATE, CHAT_BODY, api_key="cb-secret")
    await client.complete_rollout(TRAINGATE, final_response(), api_key="cb-secret")
    assert [r.headers.get("authorization") for r in gate.requests] == [
        "Bearer cb-secret",
        "Bearer cb-secret",
    ]


async def test_no_authorization_header_without_callback_key() -> None:
    gate = FakeTrainGate()
    client = make_client(gate, FakeSleep())
    await client.chat(TRAINGATE, CHAT_BODY, api_key=None)
    await client.complete_rollout(TRAINGATE, final_response(), api_key=None)
    assert all("authorization" not in r.headers for r in gate.requests)


async def test_one_transport_is_shared_across_calls_and_rebuilt_after_close() -> None:
    client = TrainGateClient(RolloutClientSettings(max_connections=7, max_keepalive_connections=3))
    transport = client.transport
    assert isinstance(transport, AiohttpTransport)
    assert client.transport is transport
    assert transport.max_connections == 7
    # Below uvicorn's 5 s idle timeout, so the pool rarely offers a connection already closed.
    assert transport.keepalive_expiry == KEEPALIVE_EXPIRY_SECONDS < 5
    await client.aclose()
    assert client.transport is not transport


async def test_every_request_carries_the_configured_timeout() -> None:
    gate = FakeTrainGate()
    client = make_client(gate, FakeSleep(), timeout_seconds=12.5)
    await client.chat(TRAINGATE, CHAT_BODY, api_key="a")
    await client.complete_rollout(TRAINGATE, final_response(), api_key="b")
    expected = {"connect": 12.5, "read": 12.5, "write": 12.5, "pool": 12.5}
    assert [r.extensions["timeout"] for r in gate.requests] == [expected, expected]
    await client.aclose()


async def test_a_stale_pooled_connection_is_retried_once_at_once_without_using_a_retry() -> None:
    stale = StaleConnectionError("pooled connection failed")
    gate = FakeTrainGate(chat=[stale, httpx.Response(200, json=completion())])
    sleep = FakeSleep()
    client = make_client(gate, sleep, max_retries=0)
    result = await client.chat(TRAINGATE, CHAT_BODY, api_key="a")
    assert result.choices
    assert len(gate.requests) == 2
    assert sleep.calls == []
    await client.aclose()


async def test_a_second_stale_failure_in_a_row_counts_as_an_attempt() -> None:
    stale = StaleConnectionError("pooled connection failed")
    gate = FakeTrainGate(completed=[stale])
    sleep = FakeSleep()
    client = make_client(gate, sleep, complete_rollout_retries=1)
    result = await client.complete_rollout(TRAINGATE, final_response(), api_key="b")
    # Each attempt: the request and its one immediate re-send; one retry after a backoff.
    assert (result.delivered, result.final, result.attempts) == (False, False, 2)
    assert "StaleConnectionError" in str(result.error)
    assert len(gate.requests) == 4
    assert len(sleep.calls) == 1
    await client.aclose()


# --------------------------------------------------------------------------- the stored dump


class SpanRecorder:
    """A telemetry port that keeps the rollout id of each span opened."""

    def __init__(self) -> None:
        self.spans: list[tuple[Span, str]] = []

    def count(self, metric: Metric, value: float = 1, /, **_: str) -> None:
        pass

    def observe(self, metric: Metric, value: float, /, **_: str) -> None:
        pass

    def span(self, name: Span, *, rollout_id: str) -> AbstractContextManager[None]:
        self.spans.append((name, rollout_id))
        return contextlib.nullcontext()


async def test_complete_rollout_sends_a_stored_dump_as_is_with_the_models_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = final_response()
    dump = model.model_dump(mode="json")
    from_model, from_dump = FakeTrainGate(), FakeTrainGate()
    telemetry = SpanRecorder()
    await make_client(from_model, FakeSleep()).complete_rollout(TRAINGATE, model, api_key="k")

    def no_pydantic(*_: Any, **__: Any) -> Any:
        raise AssertionError("a dump is sent without pydantic")

    monkeypatch.setattr(RolloutResponse, "model_dump", no_pydantic)
    monkeypatch.setattr(RolloutResponse, "model_dump_json", no_pydantic)
    client = TrainGateClient(transport=from_dump.transport, sleep=FakeSleep(), telemetry=telemetry)
    result = await client.complete_rollout(TRAINGATE, dump, api_key="k")
    assert (result.delivered, result.attempts) == (True, 1)
    assert [r.content for r in from_dump.requests] == [r.content for r in from_model.requests]
    assert from_dump.bodies(COMPLETED_PATH) == [dump]
    assert telemetry.spans == [(Span.CALLBACK, "rollout-1")]


@pytest.mark.parametrize("as_dump", [False, True], ids=["model", "dump"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
async def test_complete_rollout_refuses_nan_and_infinities_as_a_final_result(
    as_dump: bool, value: float
) -> None:
    model = RolloutResponse(rollout_id="r", status=RolloutStatus.COMPLETED, reward=value)
    response = model.model_dump(mode="json") if as_dump else model
    gate = FakeTrainGate()
    result = await make_client(gate, FakeSleep()).complete_rollout(
        TRAINGATE, response, api_key=None
    )
    assert (result.delivered, result.final, result.attempts) == (False, True, 0)
    assert result.error is not None and "not valid JSON" in result.error
    assert gate.requests == []


async def test_complete_rollout_refuses_a_dump_json_cannot_hold_as_a_final_result() -> None:
    dump = final_response().model_dump(mode="json")
    dump["extra_fields"] = {"when": object()}
    gate = FakeTrainGate()
    result = await make_client(gate, FakeSleep()).complete_rollout(TRAINGATE, dump, api_key=None)
    assert (result.delivered, result.final, result.attempts) == (False, True, 0)
    assert gate.requests == []
