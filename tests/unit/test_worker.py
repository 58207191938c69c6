"""The worker over MemoryStore and a TrainGate behind MockTransport: claim, run, finish, deliver."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from rollout_sdk.agent.loop import RolloutContext, RolloutResult
from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.engine.costs import NO_COSTS, CostLedger
from rollout_sdk.engine.responses import error_response
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.errors import FailureCategory
from rollout_sdk.protocol import InitResponse, Message, RolloutRequest, RolloutStatus
from rollout_sdk.settings import RolloutClientSettings, load_settings
from rollout_sdk.store.base import TransitionResult
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry
from rollout_sdk.traingate.client import CHAT_PATH, COMPLETED_PATH, TrainGateClient

from .support import ADD_TOOL, EchoAgent, FakeSleep, FakeTrainGate, completion, make_request

FIRST_TURN: Message = {"role": "assistant", "content": "4"}


class TwoTurnAgent(EchoAgent):
    """Two chat turns, with one tool call recorded in between."""

    name = "two-turn"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages: list[Message] = list(ctx.request.messages)
        for _ in range(2):
            result = await ctx.chat(messages, **ctx.request.completion_params)
            messages.append(result.message)
        ctx.record_tool_call(latency_ms=3.0)
        return ctx.complete(messages, reward=0.75)


class RaisingAgent(EchoAgent):
    name = "raising"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        raise ValueError("the environment exploded")


class SlowAgent(EchoAgent):
    """One completed turn, then hangs past any deadline."""

    name = "slow"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        await ctx.chat(list(ctx.request.messages))
        await asyncio.sleep(30)
        return ctx.complete([])


class OwnTimeoutAgent(EchoAgent):
    """A tool of its own timed out: not the rollout's deadline."""

    name = "own-timeout"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        await asyncio.wait_for(asyncio.sleep(1), timeout=0.001)
        return ctx.complete([])


class WrongReturnAgent(EchoAgent):
    name = "wrong-return"

    async def run(self, ctx: RolloutContext) -> Any:
        return {"status": "COMPLETED"}


class StringStatusAgent(EchoAgent):
    name = "string-status"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        return RolloutResult(status="COMPLETED", final_messages=[FIRST_TURN], finish_reason="stop")


class ErrorResultAgent(EchoAgent):
    name = "error-result"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        return ctx.error("gave up", final_messages=[FIRST_TURN])


@dataclass
class Rig:
    worker: RolloutWorker
    store: MemoryStore
    gate: FakeTrainGate
    sleep: FakeSleep
    request: RolloutRequest

    async def record(self) -> RolloutRecord:
        record = await self.store.get(self.request.rollout_id, now=time.time())
        assert record is not None
        return record


async def make_rig(
    agent: EchoAgent | None = None,
    *,
    gate: FakeTrainGate | None = None,
    complete_rollout_retries: int = 2,
    costs: CostLedger = NO_COSTS,
) -> Rig:
    store = MemoryStore()
    gate = gate or FakeTrainGate()
    sleep = FakeSleep()
    client = TrainGateClient(
        RolloutClientSettings(complete_rollout_retries=complete_rollout_retries, max_retries=0),
        transport=gate.transport,
        sleep=sleep,
    )
    request = make_request()
    now = time.time()
    record = RolloutRecord.new(
        request,
        InitResponse(rollout_id=request.rollout_id, tools=[ADD_TOOL]),
        now=now,
        ttl_seconds=3600,
    )
    assert (await store.create(record, now=now)).created
    engine = Engine.build(
        store=store,
        client=client,
        settings=load_settings(),
        agent_loop=agent or TwoTurnAgent(),
        costs=costs,
    )
    return Rig(engine.require_worker(), store, gate, sleep, request)


JOB = Job(rollout_id="rollout-1", attempt=1, api_key="cb-key")


async def test_happy_path_reaches_delivered_with_metrics() -> None:
    gate = FakeTrainGate(chat_delay=0.005)
    rig = await make_rig(gate=gate)
    final = await rig.worker.run(JOB)
    assert final is not None
    assert final.state == RecordState.DELIVERED
    assert final.delivered_at is not None
    assert final.delivery_attempts == 1
    assert final.attempt == 1
    assert final.lease_until is None
    assert await rig.record() == final

    (sent,) = gate.bodies(COMPLETED_PATH)
    assert sent == final.response
    assert sent["status"] == "COMPLETED"
    assert sent["reward"] == 0.75
    assert sent["final_messages"] == [*rig.request.messages, FIRST_TURN, FIRST_TURN]
    metrics = sent["metrics"]
    assert metrics["num_llm_calls"] == 2
    assert metrics["prompt_tokens"] == 20
    assert metrics["response_tokens"] == 10
    assert metrics["max_context_tokens"] == 15
    assert metrics["num_tool_calls"] == 1
    assert metrics["tool_latency_ms"] == 3.0
    assert metrics["llm_latency_ms"] >= 2 * 5 * 0.9
    assert metrics["total_latency_ms"] >= metrics["llm_latency_ms"] > 0


async def test_a_job_carrying_inits_models_is_not_validated_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = await make_rig()
    validated_from_store: list[str] = []
    original_request = RolloutRecord.rollout_request
    original_init = RolloutRecord.init_response_model

    def counting(self: RolloutRecord, api_key: str | None = None) -> RolloutRequest:
        validated_from_store.append("request")
        return original_request(self, api_key)

    def counting_init(self: RolloutRecord) -> InitResponse:
        validated_from_store.append("init_response")
        return original_init(self)

    monkeypatch.setattr(RolloutRecord, "rollout_request", counting)
    monkeypatch.setattr(RolloutRecord, "init_response_model", counting_init)
    request = RolloutRequest.model_validate({**rig.request.model_dump(), "api_key": "cb-key"})
    record = await rig.store.get("rollout-1", now=time.time())
    assert record is not None
    init_response = original_init(record)
    job = Job("rollout-1", 1, "cb-key", request=request, init_response=init_response)
    final = await rig.worker.run(job)
    assert final is not None
    assert final.state == RecordState.DELIVERED
    assert validated_from_store == []
    # Without them (a job from another process, or after a restart), the stored copies are used.
    rig2 = await make_rig()
    assert await rig2.worker.run(JOB) is not None
    assert validated_from_store == ["request", "init_response"]


async def test_callback_key_and_completion_params_reach_traingate() -> None:
    rig = await make_rig()
    await rig.worker.run(JOB)
    assert [r.headers["authorization"] for r in rig.gate.requests] == ["Bearer cb-key"] * 3
    chat = rig.gate.bodies(CHAT_PATH)
    assert [body["temperature"] for body in chat] == [0.7, 0.7]
    assert [body["max_tokens"] for body in chat] == [64, 64]
    assert all(body["rollout_id"] == "rollout-1" for body in chat)
    assert rig.gate.requests[0].url.path == "/base/v1/chat/completions"


async def test_agent_raising_becomes_an_error_response() -> None:
    rig = await make_rig(RaisingAgent())
    final = await rig.worker.run(JOB)
    assert final is not None
    assert final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert sent["error_message"] == "ValueError: the environment exploded"
    assert sent["finish_reason"] == "error"
    assert sent["final_messages"] == rig.request.messages
    assert sent["metrics"]["total_latency_ms"] > 0


async def test_agent_error_result_is_sent_as_is() -> None:
    rig = await make_rig(ErrorResultAgent())
    await rig.worker.run(JOB)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert (sent["status"], sent["error_message"]) == ("ERROR", "gave up")
    assert sent["final_messages"] == [FIRST_TURN]


async def test_string_status_is_accepted() -> None:
    rig = await make_rig(StringStatusAgent())
    await rig.worker.run(JOB)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "COMPLETED"


async def test_deadline_gives_a_timeout_error_with_the_last_completed_turn() -> None:
    rig = await make_rig(SlowAgent())
    started = time.perf_counter()
    final = await rig.worker.run(JOB, deadline_seconds=0.05)
    assert time.perf_counter() - started < 5
    assert final is not None
    assert final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert sent["finish_reason"] == "timeout"
    assert "deadline" in sent["error_message"]
    assert sent["final_messages"] == [*rig.request.messages, FIRST_TURN]
    assert sent["metrics"]["num_llm_calls"] == 1


async def test_request_timeout_setting_bounds_the_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS", "0.05")
    rig = await make_rig(SlowAgent())
    await rig.worker.run(JOB)  # no explicit deadline: the setting applies
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["finish_reason"] == "timeout"
    assert "OSMOSIS_ROLLOUT_SERVER_REQUEST_TIMEOUT_SECONDS" in sent["error_message"]


async def test_agents_own_timeout_is_not_reported_as_the_deadline() -> None:
    rig = await make_rig(OwnTimeoutAgent())
    await rig.worker.run(JOB)
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert sent["finish_reason"] == "error"
    assert sent["error_message"].startswith("TimeoutError")
    assert "deadline" not in sent["error_message"]


async def test_claim_sets_running_with_a_lease() -> None:
    seen: list[RolloutRecord | None] = []

    class Peek(EchoAgent):
        name = "peek"

        async def run(self, ctx: RolloutContext) -> RolloutResult:
            seen.append(await rig.store.get("rollout-1", now=time.time()))
            return ctx.complete([])

    rig = await make_rig(Peek())
    before = time.time()
    await rig.worker.run(Job("rollout-1", attempt=3), deadline_seconds=40)
    (running,) = seen
    assert running is not None
    assert running.state == RecordState.RUNNING
    assert running.attempt == 3
    assert running.lease_until is not None
    # A short lease (ROLLOUT_SDK_LEASE_SECONDS, 60 s) that heartbeats renew, not the deadline.
    assert before + 59 <= running.lease_until <= time.time() + 60


async def test_second_run_of_the_same_job_claims_nothing_and_sends_nothing() -> None:
    rig = await make_rig()
    assert await rig.worker.run(JOB) is not None
    sent_before = len(rig.gate.requests)
    assert await rig.worker.run(JOB) is None
    assert await rig.worker.run(Job("rollout-1", attempt=2, api_key="cb-key")) is None
    assert len(rig.gate.requests) == sent_before
    assert (await rig.record()).state == RecordState.DELIVERED


async def test_concurrent_deliveries_of_one_job_run_it_once() -> None:
    rig = await make_rig()
    results = await asyncio.gather(*(rig.worker.run(JOB) for _ in range(5)))
    assert sum(r is not None for r in results) == 1
    assert len(rig.gate.on(COMPLETED_PATH)) == 1
    assert len(rig.gate.on(CHAT_PATH)) == 2


async def test_unknown_rollout_runs_nothing() -> None:
    rig = await make_rig()
    assert await rig.worker.run(Job("no-such-rollout")) is None
    assert rig.gate.requests == []


async def test_callback_4xx_is_undeliverable_and_not_retried() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(404, text="unknown rollout")])
    rig = await make_rig(gate=gate)
    final = await rig.worker.run(JOB)
    assert final is not None
    assert final.state == RecordState.UNDELIVERABLE
    assert final.last_error is not None
    assert "404" in final.last_error
    assert len(gate.on(COMPLETED_PATH)) == 1
    assert rig.sleep.calls == []
    assert await rig.record() == final


async def test_callback_5xx_every_time_stays_finished_for_redrive() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(503)])
    rig = await make_rig(gate=gate, complete_rollout_retries=2)
    before = time.time()
    final = await rig.worker.run(JOB)
    assert final is not None
    assert final.state == RecordState.FINISHED
    assert final.next_attempt_at is not None
    assert final.next_attempt_at >= before
    assert final.delivery_attempts == 3
    assert final.last_error is not None
    assert "503" in final.last_error
    assert final.response is not None
    assert final.response["status"] == "COMPLETED"
    assert len(gate.on(COMPLETED_PATH)) == 3
    assert len(rig.sleep.calls) == 2
    stored = await rig.record()
    assert stored.state == RecordState.FINISHED
    assert stored.next_attempt_at == final.next_attempt_at


async def test_redelivery_resends_the_identical_response_then_stops() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(500), httpx.Response(500), httpx.Response(202)])
    rig = await make_rig(gate=gate, complete_rollout_retries=1)
    parked = await rig.worker.run(JOB)
    assert parked is not None
    assert parked.state == RecordState.FINISHED
    delivered = await rig.worker.delivery.deliver(parked, api_key="cb-key")
    assert delivered.state == RecordState.DELIVERED
    assert delivered.delivery_attempts == 3
    bodies = rig.gate.bodies(COMPLETED_PATH)
    assert len(bodies) == 3
    assert bodies[0] == bodies[1] == bodies[2]
    again = await rig.worker.delivery.deliver(delivered, api_key="cb-key")
    assert again == delivered
    assert len(rig.gate.on(COMPLETED_PATH)) == 3  # never sent after a 2xx


async def test_non_rollout_result_becomes_an_error() -> None:
    rig = await make_rig(WrongReturnAgent())
    final = await rig.worker.run(JOB)
    assert final is not None
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert "RolloutResult" in sent["error_message"]
    assert "dict" in sent["error_message"]


async def test_chat_failure_inside_the_agent_becomes_an_error() -> None:
    gate = FakeTrainGate(chat=[httpx.Response(400, text="bad request")])
    rig = await make_rig(gate=gate)
    await rig.worker.run(JOB)
    (sent,) = gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert sent["error_message"].startswith("OsmosisValidationError")
    assert sent["metrics"]["num_llm_calls"] == 1


async def test_finish_lost_to_another_writer_keeps_the_stored_response() -> None:
    class Hijacked(EchoAgent):
        name = "hijacked"

        async def run(self, ctx: RolloutContext) -> RolloutResult:
            # A recovery sweep fixes an ERROR response while this attempt still runs.
            now = time.time()
            swept = await rig.store.settle(
                "rollout-1",
                attempt=JOB.attempt,
                response=error_response(
                    "rollout-1", "swept", category=FailureCategory.WORKER_LOST, attempt=1
                ),
                lease_until=now + 60,
                expires_at=expiry(now, 3600),
                now=now,
                even_if_leased=True,
            )
            assert swept.applied
            return ctx.complete([])

    rig = await make_rig(Hijacked())
    final = await rig.worker.run(JOB)
    assert final is not None
    stored = final.response_model()
    assert stored is not None and stored.error_message == "swept"
    assert rig.gate.on(COMPLETED_PATH) == []


def test_completion_fixture_shape() -> None:
    # The helper the other tests rely on builds what the client parses.
    body: dict[str, Any] = completion(usage=None)
    assert body["usage"] is None
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "4"}


class ShapedResultAgent(EchoAgent):
    """Returns whatever result it is given: shapes the protocol cannot carry."""

    name = "shaped"

    def __init__(self, result: RolloutResult) -> None:
        self.result = result

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        await ctx.chat(list(ctx.request.messages))
        return self.result


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        (RolloutResult(status="completed", final_messages=[]), "status"),
        (RolloutResult(status="COMPLETED", final_messages=["not a message"]), "final_messages"),  # type: ignore[list-item]
        (RolloutResult(status="COMPLETED", reward=float("nan")), "reward"),
        (RolloutResult(status="COMPLETED", reward=float("inf")), "reward"),
        (RolloutResult(status="COMPLETED", metrics={"num_llm_calls": 1}), "metrics"),  # type: ignore[arg-type]
        (
            RolloutResult(
                status="COMPLETED", final_messages=[{"role": "tool", "content": object()}]
            ),
            "serialize",
        ),
    ],
)
async def test_a_result_the_protocol_cannot_carry_still_ends_the_rollout(
    result: RolloutResult, problem: str
) -> None:
    rig = await make_rig(ShapedResultAgent(result))
    final = await rig.worker.run(JOB)
    assert final is not None
    assert final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert sent["error_message"].startswith("the agent's result cannot be sent")
    assert problem.lower() in sent["error_message"].lower()
    assert sent["metrics"]["num_llm_calls"] == 1


def _counting_encoders(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[bytes]]:
    """Each encoding the worker (engine/responses.py) and the TrainGate client make."""
    from rollout_sdk.engine import responses
    from rollout_sdk.traingate import client as client_module

    made: dict[str, list[bytes]] = {"worker": [], "client": []}
    real = client_module.encode_json

    def counted(into: list[bytes]) -> Any:
        def encode(body: Any) -> bytes:
            into.append(real(body))
            return into[-1]

        return encode

    monkeypatch.setattr(responses, "encode_json", counted(made["worker"]))
    monkeypatch.setattr(client_module, "encode_json", counted(made["client"]))
    return made


async def test_the_final_response_is_encoded_once_and_posted_as_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _counting_encoders(monkeypatch)
    rig = await make_rig()
    final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    (posted,) = rig.gate.on(COMPLETED_PATH)
    # The worker's one encoding, of the very dump the record holds, is what the callback posted;
    # the client encoded the two chat calls' bodies only.
    assert made["worker"] == [posted.content]
    assert json.loads(posted.content) == final.response
    assert [json.loads(body)["rollout_id"] for body in made["client"]] == [JOB.rollout_id] * 2


class SurrogateAgent(EchoAgent):
    """A result holding an unpaired surrogate (a chat answer's "\\ud800"): UTF-8 has no form."""

    name = "surrogate"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        return ctx.complete([{"role": "assistant", "content": "half a pair: \ud800"}])


async def test_a_result_utf8_cannot_carry_is_reported_as_invalid_result() -> None:
    rig = await make_rig(SurrogateAgent())
    final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent == final.response
    assert sent["status"] == "ERROR"
    assert sent["extra_fields"]["rollout_sdk"]["failure"]["category"] == "invalid_result"
    assert "the agent's result cannot be sent" in sent["error_message"]


async def test_a_finish_that_returns_a_copy_of_the_response_has_it_encoded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _counting_encoders(monkeypatch)
    rig = await make_rig()
    real = rig.store.finish

    async def copying(rollout_id: str, **kwargs: Any) -> TransitionResult:
        moved = await real(rollout_id, **kwargs)
        assert moved.record is not None and moved.record.response is not None
        # A store that returns the record as read back: an equal dump, not the worker's object.
        copy = moved.record.evolve(response=json.loads(json.dumps(moved.record.response)))
        return TransitionResult(moved.applied, copy)

    rig.store.finish = copying  # type: ignore[method-assign]
    final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    (posted,) = rig.gate.on(COMPLETED_PATH)
    assert len(made["worker"]) == 1
    assert made["client"][-1] == posted.content == made["worker"][0]
    assert len(made["client"]) == 3  # the two chat calls and the callback, encoded again


async def test_a_response_the_store_refuses_is_replaced_by_a_small_error() -> None:
    from rollout_sdk.errors import StoreError

    rig = await make_rig(TwoTurnAgent())
    real = rig.store.finish
    refused: list[str] = []

    async def picky(rollout_id: str, **kwargs: Any) -> Any:
        if kwargs["response"]["status"] == RolloutStatus.COMPLETED:
            refused.append(rollout_id)
            raise StoreError("item too large")
        return await real(rollout_id, **kwargs)

    rig.store.finish = picky  # type: ignore[method-assign]
    final = await rig.worker.run(JOB)
    assert refused == [JOB.rollout_id]
    assert final is not None
    assert final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR"
    assert "could not be stored: item too large" in sent["error_message"]


# --------------------------------------------------------------------------- ended by the call


class CatchingAgent(EchoAgent):
    """Catches every chat failure and reports success anyway."""

    name = "catching"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        try:
            await ctx.chat(list(ctx.request.messages))
        except Exception:
            return ctx.complete([], reward=1.0)
        return ctx.complete([], reward=0.0)


@pytest.mark.parametrize("agent", [TwoTurnAgent(), CatchingAgent()])
async def test_a_refused_address_ends_the_rollout_once_and_its_callback_is_not_sent(
    agent: EchoAgent,
) -> None:
    from rollout_sdk.traingate.transport import AddressRefusedError

    refused = AddressRefusedError("'traingate.test' resolves to 10.0.0.1, which is private")
    rig = await make_rig(agent, gate=FakeTrainGate(chat=[refused], completed=[refused]))
    final = await rig.worker.run(JOB)
    assert final is not None
    assert final.state == RecordState.UNDELIVERABLE
    assert final.last_error is not None and "not sent" in final.last_error
    assert final.delivery_attempts == 0
    response = final.response_model()
    assert response is not None and response.status == RolloutStatus.ERROR
    assert response.reward is None  # the agent's reward does not stand
    assert response.extra_fields["rollout_sdk"]["failure"] == {
        "category": "outbound_refused",
        "retryable": False,
        "attempt": 1,
    }
    assert len(rig.gate.on(CHAT_PATH)) == 1  # the transport refused it; never retried
    assert rig.gate.on(COMPLETED_PATH) == []
    assert rig.sleep.calls == []


async def test_an_oversized_chat_answer_ends_the_rollout_in_its_own_category() -> None:
    from rollout_sdk.traingate.transport import AnswerTooLargeError

    too_large = AnswerTooLargeError("the answer's body is larger than that")
    rig = await make_rig(CatchingAgent(), gate=FakeTrainGate(chat=[too_large]))
    final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    (sent,) = rig.gate.bodies(COMPLETED_PATH)
    assert sent["status"] == "ERROR" and sent["reward"] is None
    assert sent["extra_fields"]["rollout_sdk"]["failure"]["category"] == "answer_too_large"
    assert "larger than that" in sent["error_message"]
    assert len(rig.gate.on(CHAT_PATH)) == 1
