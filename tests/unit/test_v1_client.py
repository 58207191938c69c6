"""v1's standalone ``OsmosisLLMClient``: built from a URL and a rollout id, used as ``async with``,
its chat call, its completion callback, its metrics, its errors (TrainGate behind MockTransport)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rollout_sdk import (
    LLMClientProtocol,
    OsmosisLLMClient,
    OsmosisServerError,
    OsmosisTimeoutError,
    OsmosisTransportError,
    OsmosisValidationError,
    RolloutContext,
    RolloutMetrics,
)
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH

from .support import TRAINGATE, FakeTrainGate, completion, make_request

HISTORY: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
#: No waiting between retries.
FAST = RolloutClientSettings(retry_base_delay=0.0, retry_max_delay=0.0)


def make_client(gate: FakeTrainGate, **options: Any) -> OsmosisLLMClient:
    options.setdefault("settings", FAST)
    return OsmosisLLMClient(
        TRAINGATE + "/", "rollout-7", api_key="cb-key", transport=gate.transport, **options
    )


async def test_chat_then_complete_as_v1_documents_it() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(200, json=completion("4", usage=(11, 3, 14)))])
    async with make_client(gate) as client:
        assert isinstance(client, LLMClientProtocol)
        assert client.server_url == TRAINGATE  # trailing slash stripped
        result = await client.chat_completions(messages=HISTORY, temperature=0.7, stop="END")
        assert result.content == "4"
        metrics = client.get_metrics()
        assert (metrics.num_llm_calls, metrics.prompt_tokens, metrics.response_tokens) == (1, 11, 3)
        assert metrics.llm_latency_ms > 0
        await client.complete_rollout("COMPLETED", [*HISTORY, result.message], reward=1.0)

    (chat,) = gate.on(CHAT_PATH)
    assert chat.url == TRAINGATE + CHAT_PATH
    assert chat.headers["authorization"] == "Bearer cb-key"
    (body,) = gate.bodies(CHAT_PATH)
    assert body["rollout_id"] == "rollout-7"
    assert body["messages"] == HISTORY
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 1.0, 512)
    assert body["stop"] == ["END"]
    assert body["logprobs"] is True
    (done,) = gate.bodies(COMPLETED_PATH)
    assert done["rollout_id"] == "rollout-7"
    assert done["status"] == "COMPLETED"
    assert done["reward"] == 1.0
    # Metrics default to the client's own.
    assert done["metrics"]["num_llm_calls"] == 1
    assert done["metrics"]["prompt_tokens"] == 11
    assert gate.on(COMPLETED_PATH)[0].headers["authorization"] == "Bearer cb-key"


async def test_get_metrics_is_a_copy() -> None:
    client = make_client(FakeTrainGate())
    client.get_metrics().num_llm_calls = 99
    assert client.get_metrics().num_llm_calls == 0
    await client.close()


async def test_explicit_metrics_and_error_status_are_sent() -> None:
    gate = FakeTrainGate()
    async with make_client(gate) as client:
        await client.complete_rollout(
            "ERROR", [], finish_reason="error", error_message="boom",
            metrics=RolloutMetrics(num_tool_calls=4),
        )  # fmt: skip
    (done,) = gate.bodies(COMPLETED_PATH)
    assert (done["status"], done["finish_reason"], done["error_message"]) == (
        "ERROR",
        "error",
        "boom",
    )
    assert done["metrics"]["num_tool_calls"] == 4


async def test_an_unknown_status_is_refused_before_any_request() -> None:
    gate = FakeTrainGate()
    async with make_client(gate) as client:
        with pytest.raises(ValueError, match="DONE"):
            await client.complete_rollout("DONE", [])
    assert gate.requests == []


def test_none_takes_the_settings_values_and_given_values_win() -> None:
    settings = RolloutClientSettings(timeout_seconds=42, max_retries=5, complete_rollout_retries=4)
    default = OsmosisLLMClient(TRAINGATE, "r", settings=settings)
    assert (default.timeout_seconds, default.max_retries, default.complete_rollout_retries) == (
        42,
        5,
        4,
    )
    assert default.api_key is None
    given = OsmosisLLMClient(TRAINGATE, "r", None, 7, 0, 1, settings)
    assert (given.timeout_seconds, given.max_retries, given.complete_rollout_retries) == (7, 0, 1)


def test_without_settings_the_process_settings_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollout_sdk import reset_settings

    monkeypatch.setenv("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES", "6")
    reset_settings()
    try:
        assert OsmosisLLMClient(TRAINGATE, "r").max_retries == 6
    finally:
        monkeypatch.delenv("OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES")
        reset_settings()


def test_an_out_of_range_value_is_refused() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        OsmosisLLMClient(TRAINGATE, "r", max_retries=-1, settings=FAST)


async def test_a_4xx_is_final_and_a_5xx_is_retried() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(400, text="bad messages")])
    async with make_client(gate, max_retries=3) as client:
        with pytest.raises(OsmosisValidationError) as refused:
            await client.chat_completions(HISTORY)
    assert refused.value.status_code == 400
    assert len(gate.on(CHAT_PATH)) == 1

    gate = FakeTrainGate(chat=[httpx.Response(503), httpx.Response(200, json=completion("ok"))])
    async with make_client(gate, max_retries=1) as client:
        assert (await client.chat_completions(HISTORY)).content == "ok"
    assert len(gate.on(CHAT_PATH)) == 2

    gate = FakeTrainGate(chat=[httpx.Response(502)])
    async with make_client(gate, max_retries=1) as client:
        with pytest.raises(OsmosisServerError) as failed:
            await client.chat_completions(HISTORY)
    assert failed.value.status_code == 502
    assert len(gate.on(CHAT_PATH)) == 2


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (httpx.ReadTimeout("slow"), OsmosisTimeoutError),
        (httpx.ConnectError("refused"), OsmosisTransportError),
    ],
)
async def test_no_answer_is_a_timeout_or_a_transport_error(
    failure: Exception, error: type[Exception]
) -> None:
    gate = FakeTrainGate(chat=[failure], completed=[failure])
    async with make_client(gate, max_retries=0, complete_rollout_retries=1) as client:
        with pytest.raises(error):
            await client.chat_completions(HISTORY)
        with pytest.raises(error):
            await client.complete_rollout("COMPLETED", HISTORY)
    assert len(gate.on(COMPLETED_PATH)) == 2


@pytest.mark.parametrize(
    ("code", "error", "attempts"),
    [(422, OsmosisValidationError, 1), (500, OsmosisServerError, 3)],
)
async def test_a_callback_that_is_not_delivered_raises(
    code: int, error: type[Exception], attempts: int
) -> None:
    gate = FakeTrainGate(completed=[httpx.Response(code, text="no")])
    async with make_client(gate, complete_rollout_retries=2) as client:
        with pytest.raises(error) as caught:
            await client.complete_rollout("COMPLETED", HISTORY)
    assert getattr(caught.value, "status_code", None) == code
    assert len(gate.on(COMPLETED_PATH)) == attempts


async def test_the_client_serves_a_context() -> None:
    gate = FakeTrainGate()
    request = make_request(rollout_id="rollout-7")
    async with make_client(gate) as client:
        ctx = RolloutContext(request, [], client)
        result = await ctx.chat(HISTORY)
        ctx.record_tool_call(latency_ms=2.0)
        done = ctx.complete([*HISTORY, result.message])
    assert done.metrics is not None
    assert (done.metrics.num_llm_calls, done.metrics.num_tool_calls) == (1, 1)


async def test_close_lets_a_later_call_open_a_new_pool() -> None:
    gate = FakeTrainGate()
    client = make_client(gate)
    await client.close()
    await client.chat_completions(HISTORY)
    await client.close()
    assert len(gate.on(CHAT_PATH)) == 1
