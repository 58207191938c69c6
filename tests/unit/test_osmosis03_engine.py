"""osmosis-ai 0.3.8's wire on the kit's app and engine, in process: both protocols on one app
sharing the rollout_id space, the routes behind the server key, the result view's mapping of
the kit's categories onto 0.3.8's six, and a full or closing server's answers. The real 0.3.8
client drives the same server in tests/osmosis03/test_client.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from rollout_sdk.engine.no_v1 import NoV1AgentLoop
from rollout_sdk.engine.osmosis03 import WIRE_CATEGORIES, result_of
from rollout_sdk.engine.responses import error_response
from rollout_sdk.engine.workflows import Outcome, Workflows, kit_response
from rollout_sdk.errors import FailureCategory
from rollout_sdk.http.app import local_app, local_engine
from rollout_sdk.osmosis03 import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)
from rollout_sdk.osmosis03.types import POLLING_LEASE_HEADER
from rollout_sdk.settings import load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, RecordState

from .support import EchoAgent, accepted_record, request_body

pytestmark = pytest.mark.timeout(60)

KEY = "unit-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


class Waits(AgentWorkflow[AgentWorkflowConfig]):
    """Waits for its release (or a cancel), then answers its prompt back."""

    release = asyncio.Event()

    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        await Waits.release.wait()
        return [*ctx.prompt, {"role": "assistant", "content": "ok"}]


async def _app(
    agent: Any, store: MemoryStore | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    Waits.release = asyncio.Event()
    engine = local_engine(
        agent,
        load_settings(**settings),
        store=store if store is not None else MemoryStore(),
        workflows=Workflows(workflow=Waits, name="tests:Waits"),
    )
    app = local_app(agent, engine, keys=[KEY])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as http:
        yield http, app.state.services
        Waits.release.set()
        await engine.dispatcher.drain(5)  # type: ignore[union-attr]


@pytest.fixture
async def both() -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async for pair in _app(EchoAgent()):
        yield pair


def _submit(rollout_id: str) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id,
        "initial_messages": [{"role": "user", "content": "hi"}],
        "chat_completions_url": "http://127.0.0.1:9/v1",
        "grade": False,
    }


async def test_the_protocols_share_the_rollout_id_space(
    both: tuple[httpx.AsyncClient, Any],
) -> None:
    http, _ = both
    v1 = await http.post("/v1/rollout/init", json=request_body(rollout_id="shared-1"), headers=AUTH)
    assert v1.status_code == 202
    taken = await http.post("/rollout", json=_submit("shared-1"), headers=AUTH)
    assert taken.status_code == 409 and taken.json() == {
        "detail": "rollout_id is already registered"
    }
    assert (await http.post("/rollout", json=_submit("shared-2"), headers=AUTH)).status_code == 202
    other = await http.post(
        "/v1/rollout/init", json=request_body(rollout_id="shared-2"), headers=AUTH
    )
    assert other.status_code == 409
    # Each protocol sees only its own: v1's status does not show a 0.3.8 rollout's lease, and
    # 0.3.8's result and cancel never reach a v1 rollout.
    lease = {**AUTH, "X-Osmosis-Rollout-Lease": "x"}
    assert (await http.get("/rollout/shared-1/result", headers=lease)).status_code == 404
    everything = await http.post("/rollout/cancel", json={"all": True}, headers=AUTH)
    assert everything.json() == {"dispositions": {"shared-2": "cancelled_running"}}
    by_id = await http.post("/rollout/cancel", json={"ids": ["shared-1"]}, headers=AUTH)
    assert by_id.json() == {"dispositions": {"shared-1": "not_found"}}


async def test_the_0_3_8_routes_need_the_server_key(both: tuple[httpx.AsyncClient, Any]) -> None:
    http, _ = both
    for method, path, body in [
        ("POST", "/rollout", _submit("k-1")),
        ("GET", "/rollout/k-1/result", None),
        ("POST", "/rollout/cancel", {"all": True}),
    ]:
        answer = await http.request(method, path, json=body)
        assert answer.status_code == 401, path


async def test_bad_input_is_a_422_naming_the_field_and_stores_nothing(
    both: tuple[httpx.AsyncClient, Any],
) -> None:
    http, services = both
    for change, field in [
        ({"rollout_id": "a/b"}, "rollout_id"),
        ({"llm_api_key": ""}, "llm_api_key"),
    ]:
        answer = await http.post("/rollout", json={**_submit("bad-1"), **change}, headers=AUTH)
        assert answer.status_code == 422
        assert answer.json()["detail"][0]["loc"] == ["body", field]
    assert await services.store.get("bad-1", now=0) is None


async def test_a_v1_init_on_a_workflow_only_server_is_404_naming_the_fix() -> None:
    async for http, _ in _app(NoV1AgentLoop()):
        v1 = await http.post("/v1/rollout/init", json=request_body(rollout_id="v1-1"), headers=AUTH)
        assert v1.status_code == 404
        assert "--agent" in v1.json()["detail"]
        assert (await http.post("/rollout", json=_submit("o-1"), headers=AUTH)).status_code == 202


async def test_a_full_server_is_429_and_a_closing_one_503_and_neither_keeps_the_record() -> None:
    async for http, services in _app(
        EchoAgent(),
        server={"max_concurrent_rollouts": 1},
        kit={"max_queued_rollouts": 0},
    ):
        assert (await http.post("/rollout", json=_submit("f-1"), headers=AUTH)).status_code == 202
        full = await http.post("/rollout", json=_submit("f-2"), headers=AUTH)
        assert full.status_code == 429 and full.headers["Retry-After"] == "2"
        assert await services.store.get("f-2", now=0) is None
        await services.dispatcher.aclose()
        closing = await http.post("/rollout", json=_submit("f-3"), headers=AUTH)
        assert closing.status_code == 503
        assert await services.store.get("f-3", now=0) is None


# ------------------------------------------------------------------------ the result view


def test_every_kit_category_has_a_0_3_8_one_or_is_a_cancel() -> None:
    assert set(WIRE_CATEGORIES) | {FailureCategory.CANCELLED} == set(FailureCategory)


@pytest.mark.parametrize(
    ("category", "status", "wire"),
    [
        (FailureCategory.WORKER_LOST, RolloutStatus.FAILURE, RolloutErrorCategory.INTERNAL_ERROR),
        (FailureCategory.NEVER_STARTED, RolloutStatus.FAILURE, RolloutErrorCategory.INTERNAL_ERROR),
        (FailureCategory.LEASE_EXPIRED, RolloutStatus.FAILURE, RolloutErrorCategory.LEASE_EXPIRED),
        (FailureCategory.TIMEOUT, RolloutStatus.FAILURE, RolloutErrorCategory.TIMEOUT),
        (FailureCategory.CANCELLED, RolloutStatus.CANCELLED, None),
    ],
)
def test_an_error_the_kit_wrote_reads_as_0_3_8s_status_and_category(
    category: FailureCategory, status: RolloutStatus, wire: RolloutErrorCategory | None
) -> None:
    record = accepted_record("view-1", now=1.0).evolve(
        protocol=PROTOCOL_OSMOSIS03,
        state=RecordState.DELIVERED,
        response=error_response("view-1", "why", category=category, attempt=1).model_dump(
            mode="json"
        ),
    )
    answer = result_of(record)
    assert (answer.status, answer.err_category, answer.err_message) == (status, wire, "why")


def test_the_reward_is_sent_only_for_a_success_whose_sample_stays() -> None:
    base = accepted_record("view-2", now=1.0).evolve(
        protocol=PROTOCOL_OSMOSIS03, state=RecordState.DELIVERED
    )

    def view(outcome: Outcome) -> Any:
        response = kit_response("view-2", outcome, attempt=1).model_dump(mode="json")
        return result_of(base.evolve(response=response))

    sample = RolloutSample(messages=[{"role": "user", "content": "x"}], reward=1.0)
    kept = view(Outcome(RolloutStatus.SUCCESS, sample))
    assert kept.status is RolloutStatus.SUCCESS and kept.sample.reward == 1.0
    removed = view(
        Outcome(RolloutStatus.SUCCESS, sample.model_copy(update={"remove_sample": True}))
    )
    assert removed.sample.reward is None
    failed = view(
        Outcome(
            RolloutStatus.FAILURE,
            sample,
            "grader broke",
            RolloutErrorCategory.VALIDATION_ERROR,
            FailureCategory.AGENT_ERROR,
        )
    )
    assert (failed.status, failed.err_category, failed.sample.reward) == (
        RolloutStatus.FAILURE,
        RolloutErrorCategory.VALIDATION_ERROR,
        None,
    )
    assert failed.sample.trajectory_messages is None  # never on the wire
    # In flight: the state, and the phase the worker here set.
    assert result_of(base.evolve(state=RecordState.ACCEPTED)).status is RolloutStatus.QUEUED
    running = base.evolve(state=RecordState.RUNNING)
    assert result_of(running).status is RolloutStatus.RUNNING
    assert result_of(running, "grading").status is RolloutStatus.GRADING


async def test_a_submit_over_the_body_limit_is_413_and_stores_nothing() -> None:
    async for http, services in _app(EchoAgent(), kit={"max_body_bytes": 64 * 1024}):
        big = {**_submit("big-1"), "metadata": {"blob": "x" * (70 * 1024)}}
        answer = await http.post("/rollout", json=big, headers=AUTH)
        assert answer.status_code == 413
        assert "ROLLOUT_SDK_MAX_BODY_BYTES" in answer.json()["detail"]
        assert await services.store.get("big-1", now=0) is None


def test_an_unpaired_surrogate_in_the_outcome_still_encodes() -> None:
    outcome = Outcome(
        RolloutStatus.FAILURE,
        RolloutSample(messages=[{"role": "user", "content": "bad \ud800"}], label="l\ud800"),
        "bad \ud800 bytes",
        RolloutErrorCategory.AGENT_ERROR,
        FailureCategory.AGENT_ERROR,
    )
    response = kit_response("s-1", outcome, attempt=1).model_dump(mode="json")
    record = accepted_record("s-1", now=1.0).evolve(
        protocol=PROTOCOL_OSMOSIS03, state=RecordState.DELIVERED, response=response
    )
    answer = result_of(record)
    assert answer.err_message == "bad ? bytes"
    assert answer.sample is not None and answer.sample.label == "l?"
    answer.model_dump_json().encode("utf-8")  # what a poll writes: it encodes


class _OneFails(MemoryStore):
    async def get(self, rollout_id: str, *, now: float) -> Any:
        if rollout_id == "broken-1":
            raise RuntimeError("the store failed for this one")
        return await super().get(rollout_id, now=now)


async def test_the_lease_watch_goes_on_when_one_record_fails() -> None:
    store = _OneFails()
    async for _, services in _app(EchoAgent(), store=store):
        now = services.engine.clock()
        for rollout_id in ("broken-1", "ran-out-1"):
            record = accepted_record(rollout_id, now=now - 300).evolve(
                protocol=PROTOCOL_OSMOSIS03, poll_until=now - 100
            )
            assert (await store.create(record, now=now - 300)).created
        leases = services.osmosis03.leases
        assert await leases.check_leases() == 1  # the other was looked at, and ended
        ended = await store.get("ran-out-1", now=now)
        assert ended is not None and ended.cancel_reason == "lease_expired"
        # The one that failed is still in the index, for the next pass.
        assert "broken-1" in (await store.polled(now=now, ended_by=now)).rollout_ids


async def test_a_chat_completions_url_the_policy_refuses_is_422_naming_it_and_stores_nothing() -> (
    None
):
    async for http, services in _app(EchoAgent()):
        body = {**_submit("meta-1"), "chat_completions_url": "http://169.254.169.254/v1"}
        answer = await http.post("/rollout", json=body, headers=AUTH)
        assert answer.status_code == 422
        (problem,) = answer.json()["detail"]
        assert problem["loc"] == ["body", "chat_completions_url"]
        assert "169.254.169.254" in problem["msg"]
        assert await services.store.get("meta-1", now=0) is None


async def test_a_submit_past_the_live_limit_is_429_with_retry_after_and_stores_nothing() -> None:
    async for http, services in _app(EchoAgent(), kit={"osmosis03_max_live_rollouts": 2}):
        tokens = {}
        for rollout_id in ("live-1", "live-2"):
            submitted = await http.post("/rollout", json=_submit(rollout_id), headers=AUTH)
            tokens[rollout_id] = submitted.json()["polling_lease_token"]
        answer = await http.post("/rollout", json=_submit("live-3"), headers=AUTH)
        assert answer.status_code == 429
        assert answer.headers["Retry-After"] == "2"
        assert "ROLLOUT_SDK_OSMOSIS03_MAX_LIVE_ROLLOUTS" in answer.json()["detail"]
        assert await services.store.get("live-3", now=0) is None
        # A rollout that ends makes room again.
        cancelled = await http.post("/rollout/cancel", json={"ids": ["live-1"]}, headers=AUTH)
        assert cancelled.json()["dispositions"] == {"live-1": "cancelled_running"}
        lease = {**AUTH, POLLING_LEASE_HEADER: tokens["live-1"]}
        while (await http.get("/rollout/live-1/result", headers=lease)).json()["status"] in (
            "queued",
            "running",
        ):
            pass  # each poll waits (on the worker's pulse) for the next change
        assert await services.store.count_polled(now=services.engine.clock()) == 1
        assert (await http.post("/rollout", json=_submit("live-3"), headers=AUTH)).is_success


class _Counting(MemoryStore):
    """Counts the reads and the lease renewals a poll makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.renewals = 0

    async def get(self, rollout_id: str, *, now: float) -> Any:
        self.reads += 1
        return await super().get(rollout_id, now=now)

    async def renew_poll(self, rollout_id: str, **options: Any) -> Any:
        self.renewals += 1
        return await super().renew_poll(rollout_id, **options)


async def test_a_poll_that_nothing_wakes_reads_once_per_recheck_and_renews_once() -> None:
    """What a poll costs on Lambda, where the worker runs elsewhere: a read and a renewal, one
    read per recheck for the wait, and no write more unless the status changed."""
    store = _Counting()
    async for http, services in _app(EchoAgent(), store=store):
        osmosis03 = services.osmosis03
        osmosis03.wait_seconds, osmosis03.recheck_seconds = 1.0, 0.25
        accepted = await http.post("/rollout", json=_submit("count-1"), headers=AUTH)
        lease = {**AUTH, POLLING_LEASE_HEADER: accepted.json()["polling_lease_token"]}
        first = await http.get("/rollout/count-1/result", headers=lease)
        assert first.json()["status"] == "running"  # a change from the 202's queued: at once
        board = services.engine.board
        while board.phase("count-1") is None:  # the worker has started (its pulse)
            await board.wait("count-1", 5)
        store.reads = store.renewals = 0
        waited = await http.get("/rollout/count-1/result", headers=lease)
        assert waited.json()["status"] == "running"  # nothing changed within the wait
        # The record, then a read per recheck (4 in 1 s) and the one renewal; the worker here
        # is idle (Waits), so nothing pulsed the poll early.
        assert (store.reads, store.renewals) == (1 + 4, 1)
