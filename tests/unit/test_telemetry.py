"""The engine's telemetry on the local server: every transition counted, served at ``GET /metrics``
in Prometheus' text format and read back with ``prometheus_client``'s own parser; only there, and
behind the server key. And the log context that names each line's rollout, task by task."""

from __future__ import annotations

import asyncio
import io
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rollout_sdk.agent.loop import RolloutContext, RolloutResult
from rollout_sdk.engine.assembly import Engine
from rollout_sdk.http.app import create_app, local_app
from rollout_sdk.http.prometheus import CONTENT_TYPE, PrometheusTelemetry
from rollout_sdk.local.server import build_local_app
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState
from rollout_sdk.telemetry import (
    EmitFailures,
    Metric,
    RolloutLogFilter,
    current_rollout,
    rollout_scope,
)
from rollout_sdk.vault import LocalVault

from .support import (
    EchoAgent,
    FakeTrainGate,
    RecordingDispatcher,
    engine_for,
    request_body,
)

KEY = "server-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}


class FailingWhenAsked(EchoAgent):
    """The echo agent; ``metadata["fail"]`` makes it raise after its chat call."""

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        result = await super().run(ctx)
        if ctx.request.metadata.get("fail"):
            raise RuntimeError("the agent broke")
        return result


@dataclass
class Rig:
    engine: Engine
    http: httpx.AsyncClient
    dispatcher: RecordingDispatcher
    clock: list[float]

    async def run_all(self) -> None:
        """Run every job handed off so far, in order, as the in-process worker would."""
        worker = self.engine.require_worker()
        for job in self.dispatcher.jobs:
            await worker.run(job)
        self.dispatcher.jobs.clear()

    async def metrics(self) -> dict[str, list[Sample]]:
        answer = await self.http.get("/metrics", headers=AUTH)
        assert answer.status_code == 200
        assert answer.headers["content-type"] == CONTENT_TYPE
        return {f.name: f.samples for f in text_string_to_metric_families(answer.text)}


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    clock = [time.time()]
    telemetry = PrometheusTelemetry()
    # Callbacks in order: two delivered, one failing (parked), one refused for good, then the
    # parked one's re-send.
    gate = FakeTrainGate(
        completed=[httpx.Response(code) for code in (200, 200, 503, 400, 200)], chat_delay=0.002
    )
    agent = FailingWhenAsked()
    dispatcher = RecordingDispatcher()
    engine = engine_for(
        gate,
        vault=LocalVault(),
        agent_loop=agent,
        clock=lambda: clock[0],
        telemetry=telemetry,
        dispatcher=lambda _worker: dispatcher,
    )
    app = local_app(agent, engine, keys=[KEY], metrics=telemetry)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as http:
        yield Rig(engine, http, dispatcher, clock)


def value(samples: list[Sample], name: str, **labels: str) -> float:
    (found,) = [s.value for s in samples if s.name == name and s.labels == labels]
    return float(found)


def check_histogram(samples: list[Sample], name: str) -> tuple[int, float]:
    """Cumulative buckets ending at +Inf, which equals the count; returns (count, sum)."""
    buckets = [s for s in samples if s.name == name + "_bucket"]
    bounds = [float(s.labels["le"]) for s in buckets]
    assert bounds == sorted(bounds) and math.isinf(bounds[-1])
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), "buckets must be cumulative"
    count = value(samples, name + "_count")
    assert counts[-1] == count
    return int(count), value(samples, name + "_sum")


async def test_every_transition_is_counted_and_served_in_prometheus_format(rig: Rig) -> None:
    for rid, metadata in (("ok", {}), ("fails", {"fail": True}), ("parked", {}), ("refused", {})):
        answer = await rig.http.post(
            "/v1/rollout/init", json=request_body(rollout_id=rid, metadata=metadata), headers=AUTH
        )
        assert answer.status_code == 202
    # A duplicate accepts nothing new.
    await rig.http.post("/v1/rollout/init", json=request_body(rollout_id="ok"), headers=AUTH)
    await rig.run_all()
    store = rig.engine.store
    parked = await store.get("parked", now=rig.clock[0])
    assert parked is not None and parked.next_attempt_at is not None
    rig.clock[0] += 120  # two minutes later, the parked response is due
    report = await rig.engine.recovery.redrive()
    assert report.delivered == ["parked"]
    delivered = await store.get("parked", now=rig.clock[0])
    assert delivered is not None and delivered.state == RecordState.DELIVERED

    families = await rig.metrics()
    assert {name: samples[0].name for name, samples in families.items()} == {
        "rollout_sdk_rollouts_accepted": "rollout_sdk_rollouts_accepted_total",
        "rollout_sdk_rollouts_started": "rollout_sdk_rollouts_started_total",
        "rollout_sdk_rollouts_finished": "rollout_sdk_rollouts_finished_total",
        "rollout_sdk_rollouts_delivered": "rollout_sdk_rollouts_delivered_total",
        "rollout_sdk_rollouts_parked": "rollout_sdk_rollouts_parked_total",
        "rollout_sdk_rollouts_redriven": "rollout_sdk_rollouts_redriven_total",
        "rollout_sdk_rollouts_undeliverable": "rollout_sdk_rollouts_undeliverable_total",
        "rollout_sdk_callback_attempts": "rollout_sdk_callback_attempts_total",
        "rollout_sdk_outbound_refused": "rollout_sdk_outbound_refused_total",
        "rollout_sdk_chat_call_seconds": "rollout_sdk_chat_call_seconds_bucket",
        "rollout_sdk_rollout_duration_seconds": "rollout_sdk_rollout_duration_seconds_bucket",
        "rollout_sdk_oldest_parked_age_seconds": "rollout_sdk_oldest_parked_age_seconds",
    }

    def total(family: str, **labels: str) -> float:
        return value(families[family], family + "_total", **labels)

    assert total("rollout_sdk_rollouts_accepted") == 4
    assert total("rollout_sdk_rollouts_started") == 4
    finished = families["rollout_sdk_rollouts_finished"]
    assert {(s.labels["status"], s.labels["category"]): s.value for s in finished} == {
        ("COMPLETED", "none"): 3,
        ("ERROR", "agent_error"): 1,
    }
    assert total("rollout_sdk_rollouts_delivered") == 3  # ok, fails, and parked once re-sent
    assert total("rollout_sdk_rollouts_parked") == 1
    assert total("rollout_sdk_rollouts_undeliverable") == 1
    assert total("rollout_sdk_rollouts_redriven") == 1
    assert total("rollout_sdk_callback_attempts") == 5
    assert total("rollout_sdk_outbound_refused") == 0  # every call went to the stand-in
    chats, chat_seconds = check_histogram(
        families["rollout_sdk_chat_call_seconds"], "rollout_sdk_chat_call_seconds"
    )
    assert chats == 4 and 0.008 <= chat_seconds < 10  # seconds, not milliseconds
    runs, _ = check_histogram(
        families["rollout_sdk_rollout_duration_seconds"], "rollout_sdk_rollout_duration_seconds"
    )
    assert runs == 4
    age = value(
        families["rollout_sdk_oldest_parked_age_seconds"], "rollout_sdk_oldest_parked_age_seconds"
    )
    assert 119 <= age <= 121

    # A pass that finds nothing parked sets the gauge back to 0.
    await rig.engine.recovery.redrive()
    families = await rig.metrics()
    assert families["rollout_sdk_oldest_parked_age_seconds"][0].value == 0


async def test_metrics_need_the_server_key_when_one_is_set(rig: Rig) -> None:
    assert (await rig.http.get("/metrics")).status_code == 401
    wrong = {"Authorization": "Bearer not-the-key"}
    assert (await rig.http.get("/metrics", headers=wrong)).status_code == 401
    # With no server key configured, /metrics is as open as the rest of the API.
    app = build_local_app(EchoAgent(), store="memory")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://rollout.test"
    ) as http:
        assert (await http.get("/metrics")).status_code == 200


async def test_only_the_local_server_serves_metrics() -> None:
    plain = create_app(EchoAgent(), store=MemoryStore(), dispatcher=RecordingDispatcher())
    local = build_local_app(EchoAgent(), store="memory", api_keys=[KEY])
    for app, expected in ((plain, 404), (local, 200)):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://rollout.test"
        ) as http:
            answer = await http.get("/metrics", headers=AUTH)
        assert answer.status_code == expected
    assert "/metrics" not in str(local.openapi())  # a scrape target, not the protocol


def test_label_values_are_escaped_and_families_that_never_moved_read_zero() -> None:
    telemetry = PrometheusTelemetry()
    odd = 'a "quoted"\\ value\nwith a newline'
    telemetry.count(Metric.ROLLOUTS_FINISHED, status="ERROR", category=odd)
    telemetry.count(Metric.COLD_STARTS)  # Lambda's alone: not exposed locally
    text = telemetry.exposition()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (finished,) = families["rollout_sdk_rollouts_finished"].samples
    assert finished.labels == {"status": "ERROR", "category": odd}
    assert families["rollout_sdk_rollouts_accepted"].samples[0].value == 0
    assert families["rollout_sdk_chat_call_seconds"].type == "histogram"
    assert families["rollout_sdk_oldest_parked_age_seconds"].type == "gauge"
    assert "cold" not in text.lower()
    for line in text.splitlines():
        if line.startswith("# TYPE") and line.endswith(" counter"):
            assert line.split()[2].endswith("_total")


async def test_each_task_logs_its_own_rollout() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(rollout_id)s|%(message)s"))
    handler.addFilter(RolloutLogFilter())
    log = logging.getLogger("rollout_sdk.tests.context")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)

    async def rollout(rollout_id: str) -> None:
        with rollout_scope(rollout_id):
            for turn in range(3):
                log.info("turn %d of %s", turn, rollout_id)
                await asyncio.sleep(0)  # let the others run in between

    try:
        await asyncio.gather(*(rollout(f"r{i}") for i in range(4)))
        log.info("turn - of %s", "named", extra={"rollout_id": "named"})  # its own wins
    finally:
        log.removeHandler(handler)
    assert current_rollout() is None
    lines = stream.getvalue().splitlines()
    assert len(lines) == 13
    assert [line.split("|")[0] for line in lines[:4]] == ["r0", "r1", "r2", "r3"]  # interleaved
    assert all(line.endswith(f"of {line.split('|')[0]}") for line in lines)


def test_a_failure_to_emit_is_logged_once_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    failures = EmitFailures("writing a metric")
    for _ in range(3):
        with failures.swallowed():
            raise OSError("the pipe is closed")
    assert failures.failures == 3
    logged = [r for r in caplog.records if "writing a metric failed" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None
