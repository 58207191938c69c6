"""The engine and the cost estimate (issue 12, item 2): the figure at finish in the final
response (a success, an agent error, a kit failure in the worker), the figure after delivery in
the record and, once final, in the sink; nothing on the local server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rollout_sdk.aws import ledger as cost_ledger
from rollout_sdk.aws.ledger import MeteredLedger
from rollout_sdk.aws.metering import Costs
from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.cost.usage import CostEstimate, LambdaPart, Usage
from rollout_sdk.engine.costs import NO_COSTS, CostLedger
from rollout_sdk.engine.responses import error_response
from rollout_sdk.errors import FailureCategory
from rollout_sdk.prices import effective_prices
from rollout_sdk.protocol import EXTRA_KEY
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.traingate.client import COMPLETED_PATH
from testkit.cost import docs_usd

from .support import FakeTrainGate
from .test_worker import JOB, RaisingAgent, make_rig


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[RolloutRecord, CostEstimate]] = []

    def __call__(self, record: RolloutRecord, estimate: CostEstimate) -> None:
        self.got.append((record, estimate))


def _metered(sink: Sink | None = None) -> Costs:
    return Costs(
        hand_off="direct", memory_mb=1024, architecture="arm64", init_seconds=0.5, sink=sink
    )


def _sent_cost(gate: FakeTrainGate) -> dict[str, Any]:
    (sent,) = gate.bodies(COMPLETED_PATH)
    return dict(sent["extra_fields"][EXTRA_KEY]["cost"])


async def test_a_success_carries_its_figure_at_finish_and_the_sink_gets_the_full_one() -> None:
    gate = FakeTrainGate(chat_delay=0.01)
    rig = await make_rig(gate=gate, costs=MeteredLedger())
    sink = Sink()
    carried = Usage(functions={"api": LambdaPart(0.04, 0.0, 512, "x86_64", 1)})
    carried.units.update(lambda_request=1, http_api_request=1, dynamodb_write_unit=4)
    with _metered(sink).invocation("worker", seats=1), cost_meter.rollout() as meter:
        assert meter is not None
        meter.carry(carried.to_json())
        final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    at_finish = _sent_cost(gate)
    assert at_finish["at"] == "finish"
    assert set(at_finish["lambda"]) == {"api", "worker"}
    assert at_finish["lambda"]["worker"]["init_seconds"] == 0.5
    assert at_finish["lambda"]["worker"]["seconds"] >= 0.02  # two chat calls of 10 ms
    assert at_finish["units"]["lambda_request"] == 2.0
    assert at_finish["units"]["dynamodb_write_unit"] == 4.0  # the memory store makes no request
    assert at_finish["usd"] == pytest.approx(docs_usd(at_finish, effective_prices()), rel=1e-12)
    # The record keeps the figure after delivery; the sink got it once, with the same usage.
    assert final.extra["cost"]["usd"] >= at_finish["usd"]
    ((record, full),) = sink.got
    assert record.state == RecordState.DELIVERED
    assert (full.at, full.function, full.hand_off) == ("delivery", "worker", "direct")
    assert full.usd >= final.extra["cost"]["usd"]
    assert full.usage.functions["worker"].seconds >= at_finish["lambda"]["worker"]["seconds"]


async def test_an_agent_error_carries_its_failure_and_its_cost() -> None:
    gate = FakeTrainGate()
    rig = await make_rig(RaisingAgent(), gate=gate, costs=MeteredLedger())
    with _metered().invocation("worker", seats=1), cost_meter.rollout():
        await rig.worker.run(JOB)
    (sent,) = gate.bodies(COMPLETED_PATH)
    kit = sent["extra_fields"][EXTRA_KEY]
    assert kit["failure"]["category"] == FailureCategory.AGENT_ERROR.value
    assert kit["cost"]["at"] == "finish"


async def test_a_kit_failure_in_the_worker_carries_its_failure_and_its_cost() -> None:
    gate = FakeTrainGate()
    rig = await make_rig(gate=gate, costs=MeteredLedger())

    async def broken_finish(*_: Any, **__: Any) -> Any:
        raise RuntimeError("a bug in the kit")

    rig.store.finish = broken_finish  # type: ignore[method-assign]
    with _metered().invocation("worker", seats=1), cost_meter.rollout():
        final = await rig.worker.run(JOB)
    assert final is not None and final.state == RecordState.DELIVERED
    (sent,) = gate.bodies(COMPLETED_PATH)
    kit = sent["extra_fields"][EXTRA_KEY]
    assert kit["failure"]["category"] == FailureCategory.INFRASTRUCTURE.value
    assert kit["cost"]["lambda"]["worker"]["seconds"] > 0


@pytest.mark.parametrize("costs", [NO_COSTS, MeteredLedger()], ids=["unmetered", "metered"])
async def test_the_local_server_writes_no_estimate(costs: CostLedger) -> None:
    gate = FakeTrainGate()
    rig = await make_rig(gate=gate, costs=costs)
    # The local server's engine has no ledger; a metered one outside an invocation has no meter.
    final = await rig.worker.run(JOB)
    assert final is not None
    (sent,) = gate.bodies(COMPLETED_PATH)
    assert sent["extra_fields"] == {}
    assert "cost" not in final.extra


async def test_a_parked_figure_grows_with_each_attempt_and_the_re_drive() -> None:
    gate = FakeTrainGate(completed=[httpx.Response(503)])
    rig = await make_rig(gate=gate, complete_rollout_retries=2, costs=MeteredLedger())
    sink = Sink()
    costs = _metered(sink)
    with costs.invocation("worker", seats=1), cost_meter.rollout():
        parked = await rig.worker.run(JOB)
    assert parked is not None and parked.state == RecordState.FINISHED
    assert sink.got == []  # not final: no metric yet
    at_finish = parked.response_model()
    assert at_finish is not None
    finish_usd = at_finish.extra_fields[EXTRA_KEY]["cost"]["usd"]
    parked_figure = parked.extra["cost"]
    assert parked_figure["usd"] > finish_usd  # three callback attempts later

    # The re-drive delivers it: its part is added to the parked figure.
    gate.completed_replies = [httpx.Response(200, json={"ok": True})]
    engine = rig.worker.settlement
    with costs.invocation("redrive", shares_request=False), cost_meter.rollout():
        delivered = await engine.settle(
            JOB.rollout_id, reason="re-drive", api_key="cb-key", force=True
        )
    assert delivered is not None and delivered.state == RecordState.DELIVERED
    ((_, full),) = sink.got
    assert set(full.usage.functions) == {"worker", "redrive"}
    assert full.usd > parked_figure["usd"]
    assert full.usage.functions["worker"].seconds == pytest.approx(
        parked_figure["lambda"]["worker"]["seconds"]
    )


def test_with_estimate_keeps_the_failure_and_never_overwrites_what_is_not_the_kit_s() -> None:
    response = error_response("r", "boom", category=FailureCategory.TIMEOUT, attempt=2)
    with _metered().invocation("worker", seats=1), cost_meter.rollout():
        merged = cost_ledger.with_estimate(response)
        foreign = response.model_copy(
            update={"extra_fields": {"mine": 1, EXTRA_KEY: "not the kit's"}}
        )
        untouched = cost_ledger.with_estimate(foreign)
    kit = merged.extra_fields[EXTRA_KEY]
    assert kit["failure"] == response.extra_fields[EXTRA_KEY]["failure"]
    assert kit["cost"]["at"] == "finish"
    assert untouched.extra_fields == {"mine": 1, EXTRA_KEY: "not the kit's"}
    assert kit["cost"]["usd"] > 0
