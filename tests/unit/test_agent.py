"""The agent-author API: request building, metrics, results, context, the loop base class."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from rollout_sdk.agent.loop import (
    CompletionsResult,
    RolloutAgentLoop,
    RolloutContext,
    RolloutLLMClient,
    RolloutResult,
    debug_trace_path,
)
from rollout_sdk.errors import OsmosisRolloutError, OsmosisValidationError, RolloutCancelled
from rollout_sdk.protocol import (
    OpenAIFunctionToolSchema,
    RolloutMetrics,
    RolloutRequest,
    RolloutStatus,
)
from rollout_sdk.settings import RolloutClientSettings
from rollout_sdk.traingate.client import CHAT_PATH, TrainGateClient

from .support import ADD_TOOL, TRAINGATE, FakeSleep, FakeTrainGate, completion, make_request

HISTORY: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


def make_llm(gate: FakeTrainGate, *, rollout_id: str = "rollout-1") -> RolloutLLMClient:
    client = TrainGateClient(
        RolloutClientSettings(max_retries=0), transport=gate.transport, sleep=FakeSleep()
    )
    return RolloutLLMClient(client, server_url=TRAINGATE, rollout_id=rollout_id, api_key="cb")


def make_ctx(
    gate: FakeTrainGate | None = None,
    *,
    request: RolloutRequest | None = None,
    debug_dir: Path | None = None,
    cancelled: asyncio.Event | None = None,
) -> RolloutContext:
    request = request or make_request()
    llm = make_llm(gate or FakeTrainGate(), rollout_id=request.rollout_id)
    return RolloutContext(request, [ADD_TOOL], llm, debug_dir=debug_dir, cancelled=cancelled)


# --------------------------------------------------------------------------- build_request


def test_build_request_defaults() -> None:
    body = make_llm(FakeTrainGate()).build_request(HISTORY)
    assert body == {
        "model": "default",
        "messages": HISTORY,
        "rollout_id": "rollout-1",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 512,
        "logprobs": True,
    }


def test_build_request_params_override_defaults_and_extras_are_forwarded() -> None:
    body = make_llm(FakeTrainGate()).build_request(
        HISTORY, temperature=0.2, max_tokens=32, seed=7, presence_penalty=0.5, logprobs=False
    )
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 32
    assert body["seed"] == 7
    assert body["presence_penalty"] == 0.5
    assert body["logprobs"] is False


def test_build_request_rollout_id_and_messages_in_params_never_override() -> None:
    llm = make_llm(FakeTrainGate(), rollout_id="the-real-id")
    params = {"rollout_id": "smuggled", "messages": [{"role": "system", "content": "x"}]}
    body = llm.build_request(HISTORY, **params)
    assert body["rollout_id"] == "the-real-id"
    assert body["messages"] == HISTORY


@pytest.mark.parametrize(
    ("stop", "expected"), [("END", ["END"]), (["a", "b"], ["a", "b"]), (None, None)]
)
def test_build_request_stop(stop: Any, expected: list[str] | None) -> None:
    body = make_llm(FakeTrainGate()).build_request(HISTORY, stop=stop)
    if expected is None:
        assert "stop" not in body
    else:
        assert body["stop"] == expected


def test_build_request_omits_nulls() -> None:
    body = make_llm(FakeTrainGate()).build_request(HISTORY, top_p=None, seed=None)
    assert "top_p" not in body
    assert "seed" not in body
    assert None not in body.values()


async def test_chat_sends_the_built_request_with_completion_params() -> None:
    gate = FakeTrainGate()
    llm = make_llm(gate)
    params = {"temperature": 0.3, "rollout_id": "x", "messages": [], "seed": 1, "stop": "###"}
    await llm.chat_completions(HISTORY, **params)
    (sent,) = gate.bodies(CHAT_PATH)
    assert sent == llm.build_request(HISTORY, **params)
    assert sent["rollout_id"] == "rollout-1"
    assert sent["seed"] == 1
    assert sent["stop"] == ["###"]


# --------------------------------------------------------------------------- metrics


async def test_metrics_accumulate_over_calls() -> None:
    gate = FakeTrainGate(
        chat=[
            httpx.Response(200, json=completion(usage=(10, 5, 15))),
            httpx.Response(200, json=completion(usage=(30, 7, 37))),
            httpx.Response(200, json=completion(usage=(12, 3, 0))),  # total missing: p + c
            httpx.Response(200, json=completion(usage=None)),
        ],
        chat_delay=0.01,
    )
    llm = make_llm(gate)
    for _ in range(4):
        await llm.chat_completions(HISTORY)
    m = llm.metrics
    assert m.num_llm_calls == 4
    assert m.prompt_tokens == 52
    assert m.response_tokens == 15
    assert m.max_context_tokens == 37
    assert m.llm_latency_ms >= 4 * 10 * 0.9  # each call waited about 10 ms


async def test_failed_call_still_counts_its_call_and_latency() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(400)])
    llm = make_llm(gate)
    with pytest.raises(OsmosisValidationError):
        await llm.chat_completions(HISTORY)
    assert llm.metrics.num_llm_calls == 1
    assert llm.metrics.llm_latency_ms > 0
    assert llm.metrics.prompt_tokens == 0


async def test_chat_result_fields() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(200, json=completion("x", finish_reason=None))])
    result = await make_llm(gate).chat_completions(HISTORY)
    assert result.message == {"role": "assistant", "content": "x"}
    assert result.token_ids == [1, 2, 3]
    assert result.logprobs == [-0.1, -0.2, -0.3]
    assert result.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert result.finish_reason == "stop"  # null finish_reason defaults to "stop"


async def test_chat_with_no_choices_gives_an_empty_assistant_message() -> None:
    body = completion()
    body["choices"] = []
    result = await make_llm(FakeTrainGate(chat=[httpx.Response(200, json=body)])).chat_completions(
        HISTORY
    )
    assert result.message == {"role": "assistant", "content": ""}
    assert result.has_tool_calls is False


# --------------------------------------------------------------------------- CompletionsResult


def test_completions_result_properties_with_tool_calls() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    result = CompletionsResult(message={"role": "assistant", "content": None, "tool_calls": [call]})
    assert result.has_tool_calls is True
    assert result.tool_calls == [call]
    assert result.content is None


def test_completions_result_properties_text() -> None:
    result = CompletionsResult(message={"role": "assistant", "content": "four"})
    assert result.has_tool_calls is False
    assert result.tool_calls == []
    assert result.content == "four"
    parts = CompletionsResult(
        message={"role": "assistant", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}
    )
    assert parts.content == "ab"


def test_completions_result_empty_tool_calls_list_is_no_tool_calls() -> None:
    result = CompletionsResult(message={"role": "assistant", "content": "", "tool_calls": []})
    assert result.has_tool_calls is False
    assert result.content == ""


# --------------------------------------------------------------------------- RolloutContext


def test_context_complete() -> None:
    ctx = make_ctx()
    messages = [{"role": "assistant", "content": "4"}]
    result = ctx.complete(messages, finish_reason="max_turns", reward=0.5)
    assert result.status == RolloutStatus.COMPLETED
    assert result.final_messages == messages
    assert result.finish_reason == "max_turns"
    assert result.reward == 0.5
    assert result.error_message is None
    assert result.metrics is ctx.metrics


def test_context_complete_defaults() -> None:
    result = make_ctx().complete([])
    assert (result.finish_reason, result.reward) == ("stop", None)


def test_context_error() -> None:
    ctx = make_ctx()
    result = ctx.error("tool exploded", final_messages=[{"role": "user", "content": "x"}])
    assert result.status == RolloutStatus.ERROR
    assert result.error_message == "tool exploded"
    assert result.final_messages == [{"role": "user", "content": "x"}]
    assert result.finish_reason == "error"
    assert result.metrics is ctx.metrics
    assert make_ctx().error("no messages").final_messages == []


def test_record_tool_call_counts_calls_and_latency() -> None:
    ctx = make_ctx()
    ctx.record_tool_call(latency_ms=12.5)
    ctx.record_tool_call(latency_ms=2.5)
    ctx.record_tool_call()
    assert ctx.metrics.num_tool_calls == 3
    assert ctx.metrics.tool_latency_ms == 15.0
    assert ctx.llm.metrics is ctx.metrics


def test_context_exposes_request_tools_llm() -> None:
    request = make_request(rollout_id="ctx-1")
    ctx = make_ctx(request=request)
    assert ctx.request is request
    assert ctx.tools == [ADD_TOOL]
    assert ctx.llm.rollout_id == "ctx-1"
    assert ctx.last_messages == request.messages


def test_log_event_is_a_noop_without_debug_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ctx = make_ctx()
    assert ctx.debug_enabled is False
    ctx.log_event("turn", n=1)
    assert list(tmp_path.iterdir()) == []


def test_log_event_writes_one_json_line_per_event(tmp_path: Path) -> None:
    debug_dir = tmp_path / "traces" / "nested"
    ctx = make_ctx(debug_dir=debug_dir)
    assert ctx.debug_enabled is True
    ctx.log_event("llm_response", turn=0, has_tool_calls=False)
    ctx.log_event("rollout_complete", reward=Path("not-json-serialisable"))
    (trace,) = list(debug_dir.iterdir())
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["llm_response", "rollout_complete"]
    assert lines[0]["rollout_id"] == "rollout-1"
    assert lines[0]["turn"] == 0
    assert lines[0]["has_tool_calls"] is False
    assert lines[0]["elapsed_ms"] >= 0
    assert lines[1]["reward"] == "not-json-serialisable"


def test_v1_constructor_spelling_of_debug_dir(tmp_path: Path) -> None:
    request = make_request()
    ctx = RolloutContext(request, [], make_llm(FakeTrainGate()), _debug_dir=tmp_path)
    assert ctx.debug_enabled is True


@pytest.mark.parametrize(
    "rollout_id", ["../../etc/x", "/etc/passwd", "..", "a/../../b", "..\\..\\win", "\x00nul"]
)
def test_debug_trace_path_stays_inside_debug_dir(tmp_path: Path, rollout_id: str) -> None:
    debug_dir = tmp_path / "debug"
    ctx = make_ctx(request=make_request(rollout_id=rollout_id), debug_dir=debug_dir)
    ctx.log_event("start")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 1
    assert written[0].resolve().parent == debug_dir.resolve()
    assert json.loads(written[0].read_text())["rollout_id"] == rollout_id


@pytest.mark.parametrize(
    "rollout_id", ["rollout-1", "abc_DEF.09", "a", "x" * 128, "run.2026-12-01", "-dash-first"]
)
def test_a_safe_id_is_its_own_file_name_as_in_v1(tmp_path: Path, rollout_id: str) -> None:
    debug_dir = tmp_path / "debug"
    make_ctx(request=make_request(rollout_id=rollout_id), debug_dir=debug_dir).log_event("x")
    assert [p.name for p in debug_dir.iterdir()] == [f"{rollout_id}.jsonl"]


@pytest.mark.parametrize(
    "rollout_id",
    [
        ".hidden",  # would be a hidden file
        "x" * 129,  # past the length bound
        "a b",
        "a/b",
        "caf\u00e9",
        "name-0123456789ab",  # ends like a hashed name
    ],
)
def test_any_other_id_gets_the_hashed_name(tmp_path: Path, rollout_id: str) -> None:
    path = debug_trace_path(tmp_path, rollout_id)
    assert path.parent == tmp_path
    assert path.name != f"{rollout_id}.jsonl"
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*-[0-9a-f]{12}\.jsonl", path.name), path.name


def test_a_safe_id_never_takes_the_name_of_a_hashed_one(tmp_path: Path) -> None:
    hashed = debug_trace_path(tmp_path, "a/b")
    lookalike = hashed.name.removesuffix(".jsonl")  # a safe id spelled like that file name
    assert debug_trace_path(tmp_path, lookalike) != hashed


def test_a_trace_that_cannot_be_written_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    ctx = make_ctx(debug_dir=blocker / "traces")
    ctx.log_event("start")  # does not raise
    assert "could not write the debug trace" in caplog.text


def test_debug_trace_paths_of_distinct_ids_are_distinct(tmp_path: Path) -> None:
    first = debug_trace_path(tmp_path, "a/b")
    second = debug_trace_path(tmp_path, "a_b")
    assert first != second
    assert first.parent == second.parent == tmp_path
    assert debug_trace_path(tmp_path, "a/b") == first  # stable


async def test_ctx_chat_records_the_last_completed_turn() -> None:
    gate = FakeTrainGate()
    ctx = make_ctx(gate)
    result = await ctx.chat(HISTORY, temperature=0.1)
    assert ctx.last_messages == [*HISTORY, result.message]
    assert gate.bodies(CHAT_PATH)[0]["temperature"] == 0.1


async def test_ctx_chat_with_completion_params_carrying_rollout_id_and_messages() -> None:
    gate = FakeTrainGate()
    params = {"temperature": 0.4, "rollout_id": "other", "messages": [{"role": "x"}]}
    ctx = make_ctx(gate, request=make_request(completion_params=params))
    await ctx.chat(HISTORY, **ctx.request.completion_params)
    (sent,) = gate.bodies(CHAT_PATH)
    assert sent["messages"] == HISTORY
    assert sent["rollout_id"] == "rollout-1"
    assert sent["temperature"] == 0.4


async def test_ctx_chat_accepts_messages_by_keyword() -> None:
    gate = FakeTrainGate()
    ctx = make_ctx(gate)
    await ctx.chat(messages=HISTORY, seed=3)
    (sent,) = gate.bodies(CHAT_PATH)
    assert sent["messages"] == HISTORY
    assert sent["seed"] == 3
    with pytest.raises(TypeError, match="conversation"):
        await ctx.chat(seed=3)


async def test_ctx_chat_does_not_apply_completion_params_by_itself() -> None:
    gate = FakeTrainGate()
    ctx = make_ctx(gate, request=make_request(completion_params={"temperature": 0.01}))
    await ctx.chat(HISTORY)
    assert gate.bodies(CHAT_PATH)[0]["temperature"] == 1.0


async def test_cancelled_context_raises_before_calling_traingate() -> None:
    gate = FakeTrainGate()
    cancelled = asyncio.Event()
    ctx = make_ctx(gate, cancelled=cancelled)
    await ctx.chat(HISTORY)
    cancelled.set()
    with pytest.raises(RolloutCancelled):
        await ctx.chat(HISTORY)
    assert len(gate.requests) == 1
    assert issubclass(RolloutCancelled, OsmosisRolloutError)


# --------------------------------------------------------------------------- RolloutAgentLoop


def test_subclass_without_name_raises_type_error() -> None:
    with pytest.raises(TypeError, match="name"):

        class Nameless(RolloutAgentLoop):
            def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
                return []

            async def run(self, ctx: RolloutContext) -> RolloutResult:
                return ctx.complete([])


@pytest.mark.parametrize("bad", ["", "   ", 3])
def test_subclass_with_blank_or_non_string_name_raises_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="non-empty"):
        type(
            "BadName",
            (RolloutAgentLoop,),
            {
                "name": bad,
                "get_tools": lambda self, request: [],
                "run": _async_run,
            },
        )


async def _async_run(self: object, ctx: RolloutContext) -> RolloutResult:
    return ctx.complete([])


def test_abstract_intermediate_needs_no_name_but_its_concrete_subclass_does() -> None:
    class Base(RolloutAgentLoop):
        def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
            return []

    class Named(Base):
        name = "named"

        async def run(self, ctx: RolloutContext) -> RolloutResult:
            return ctx.complete([])

    assert Named().name == "named"
    with pytest.raises(TypeError):

        class Unnamed(Base):
            async def run(self, ctx: RolloutContext) -> RolloutResult:
                return ctx.complete([])


def test_name_is_inherited_by_a_concrete_subclass() -> None:
    class Parent(RolloutAgentLoop):
        name = "parent"

        def get_tools(self, request: RolloutRequest) -> list[OpenAIFunctionToolSchema]:
            return []

        async def run(self, ctx: RolloutContext) -> RolloutResult:
            return ctx.complete([])

    class Child(Parent):
        pass

    assert Child.name == "parent"


def test_rollout_result_defaults() -> None:
    result = RolloutResult(status="COMPLETED")
    assert result.final_messages == []
    assert result.finish_reason is None
    assert result.error_message is None
    assert result.metrics is None
    assert result.reward is None
    assert RolloutMetrics().num_llm_calls == 0


async def test_a_context_over_any_v1_llm_client_protocol() -> None:
    # v1's context took any LLMClientProtocol: metrics come from its get_metrics(), the tool
    # counts from the context.
    class ScriptedLLM:
        def __init__(self) -> None:
            self.calls = 0

        async def chat_completions(
            self, messages: list[dict[str, Any]], **kwargs: Any
        ) -> CompletionsResult:
            self.calls += 1
            return CompletionsResult(message={"role": "assistant", "content": "4"})

        def get_metrics(self) -> RolloutMetrics:
            return RolloutMetrics(num_llm_calls=self.calls, prompt_tokens=7 * self.calls)

    ctx = RolloutContext(make_request(), [], cast(Any, ScriptedLLM()))
    result = await ctx.chat(HISTORY, temperature=0.3)
    ctx.record_tool_call(latency_ms=1.5)
    ctx.record_tool_call()
    done = ctx.complete([*HISTORY, result.message])
    assert done.metrics is not None
    assert (done.metrics.num_llm_calls, done.metrics.prompt_tokens) == (1, 7)
    assert (done.metrics.num_tool_calls, done.metrics.tool_latency_ms) == (2, 1.5)
