"""The per-rollout cost estimate through handler.py and moto's server (issue 12, item 2).

Each estimate is checked twice: docs/cost.md's formula, taken from the document, applied to
the estimate's own figures gives its ``usd``; and each figure is what this test saw happen: the
requests counted by its own hooks on the runtime's clients (DynamoDB's answers made to report
capacity units the test chose, as DynamoDB does; moto reports none for most writes), the wall
time of each invocation, the context's memory and the machine's architecture.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from examples.calculator.agent import CalculatorAgent
from rollout_sdk import RolloutContext, RolloutResult
from rollout_sdk.aws.metering import Costs, machine_architecture
from rollout_sdk.cost.usage import CostEstimate
from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.prices import PRICES_READ, effective_prices
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.testing.standin import Fault, TrainGateStandIn
from testkit.cost import Tally, docs_usd
from testkit.records import park_due_now

from .conftest import ROOT
from .test_aws_path import just_under_the_metadata_limit
from .test_queue_handoff import batch, receive

EVENTS = ROOT / "events"
RID = "sample-rollout-0001"
#: What the test makes DynamoDB's answers report (capacity units per request).
CAPACITY = {"TransactWriteItems": 4.0, "UpdateItem": 2.0, "GetItem": 1.0}
PRICES = effective_prices()
MEMORY_MB = 512  # the local invoke's context, as the template's default MemorySize
queue_mode = pytest.mark.parametrize("handler", ["queue"], indirect=True)


class Sink:
    """The runtime's cost sink, as the telemetry port would be: every final figure."""

    def __init__(self) -> None:
        self.got: list[tuple[RolloutRecord, CostEstimate]] = []

    def __call__(self, record: RolloutRecord, estimate: CostEstimate) -> None:
        self.got.append((record, estimate))


class Metered:
    """A runtime's requests counted by the test, and its final figures."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.tally = Tally(CAPACITY)
        clients = handler.runtime.clients
        self.detach = self.tally.attach(
            clients.dynamodb, clients.kms, clients.sqs, clients.s3, clients.lambda_
        )
        self.sink = Sink()
        runtime = handler.runtime
        # The runtime's costs with this sink in place of the metric, before their first use:
        # a sink is given when the costs are built, never set afterwards.
        assert "costs" not in vars(runtime)
        vars(runtime)["costs"] = Costs.for_lambda(
            runtime.settings, init_seconds=runtime.init_seconds, sink=self.sink
        )

    def invoke(self, function: str, event: Any, timeout: float) -> tuple[Any, float, Counter[Any]]:
        """The call, its wall time, and the requests it made."""
        self.tally.take()
        started = time.perf_counter()
        call = invoke(self.handler, function, event, timeout_seconds=timeout)
        return call, time.perf_counter() - started, self.tally.take()


@pytest.fixture
def metered(handler: Any) -> Iterator[Metered]:
    rig = Metered(handler)
    try:
        yield rig
    finally:
        rig.detach()


def _init_event(url: str, rollout_id: str = RID) -> Any:
    event = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, rollout_id=rollout_id)
    event["body"] = json.dumps(body)
    return event


def _estimate(traingate: TrainGateStandIn, rollout_id: str = RID) -> dict[str, Any]:
    (report,) = traingate.completions[rollout_id]
    return dict(report["extra_fields"]["rollout_sdk"]["cost"])


def _record(handler: Any, rollout_id: str = RID) -> RolloutRecord:
    runtime = handler.runtime
    record = runtime.loop.run_until_complete(runtime.store.get(rollout_id, now=time.time()))
    assert isinstance(record, RolloutRecord)
    return record


def _units(**used: float) -> dict[str, float]:
    units = dict.fromkeys(PRICES, 0.0)
    for name in ("lambda_gb_second_x86_64", "lambda_gb_second_arm64", "cloudwatch_logs_gb"):
        units.pop(name)
    return units | used


def _part(part: dict[str, Any], *, wall: float, init: float, batch_size: int = 1) -> None:
    assert 0 < part["seconds"] <= wall
    assert part["init_seconds"] == pytest.approx(init, abs=1e-6)
    assert part["memory_mb"] == MEMORY_MB
    assert part["architecture"] == machine_architecture()
    assert part["batch"] == batch_size


def test_a_direct_rollouts_estimate_is_the_docs_formula_over_what_happened(
    handler: Any, metered: Metered, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    accepted, api_wall, api_seen = metered.invoke("ApiFunction", _init_event(url), 29)
    assert accepted.result["statusCode"] == 202
    ran, worker_wall, worker_seen = metered.invoke("WorkerFunction", accepted.dispatched[0], 900)
    assert ran.result["state"] == "DELIVERED"
    assert api_seen == Counter({("dynamodb", "TransactWriteItems"): 1, ("lambda", "Invoke"): 1})
    assert worker_seen == Counter({("dynamodb", "UpdateItem"): 3})  # claim, finish, delivered

    at_finish = _estimate(traingate)
    assert at_finish["usd"] == pytest.approx(docs_usd(at_finish, PRICES), rel=1e-12)
    assert (at_finish["at"], at_finish["function"], at_finish["hand_off"]) == (
        "finish",
        "worker",
        "direct",
    )
    assert at_finish["prices"] == PRICES_READ
    # The tests run every function in one process: its cold start's init went to the first
    # invocation (the API function's here); the worker's is warm.
    _part(at_finish["lambda"]["api"], wall=api_wall, init=handler.runtime.init_seconds)
    _part(at_finish["lambda"]["worker"], wall=worker_wall, init=0.0)
    # So far: the API function's invocation and the init request, the claim's transaction; the
    # worker's invocation and its claim (the finish writes this figure, after it).
    assert at_finish["units"] == _units(
        lambda_request=2.0, http_api_request=1.0, dynamodb_write_unit=4.0 + 2.0
    )
    assert at_finish["dynamodb"] == {"calls": 2, "units_assumed": 0}

    # After delivery: the record's figure has the finish (not its own write); the sink's all.
    stored = _record(handler).extra["cost"]
    assert stored["units"]["dynamodb_write_unit"] == 4.0 + 2.0 * 2
    ((record, full),) = metered.sink.got
    assert record.state == RecordState.DELIVERED
    figures = full.to_json()
    assert figures["units"]["dynamodb_write_unit"] == 4.0 + 2.0 * 3
    assert figures["usd"] == pytest.approx(docs_usd(figures, PRICES), rel=1e-12)
    assert (full.at, full.function, full.hand_off) == ("delivery", "worker", "direct")
    assert full.usd > stored["usd"] > at_finish["usd"]
    assert 0 < figures["lambda"]["worker"]["seconds"] <= worker_wall


@queue_mode
def test_a_queued_rollouts_estimate_shares_the_batch_and_is_the_docs_formula(
    handler: Any, metered: Metered, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    ids = ["cost-q-0", "cost-q-1"]
    api_walls = []
    for rid in ids:
        accepted, wall, seen = metered.invoke("ApiFunction", _init_event(url, rid), 29)
        assert accepted.result["statusCode"] == 202
        assert seen == Counter(
            {
                ("dynamodb", "TransactWriteItems"): 1,
                ("kms", "Encrypt"): 1,
                ("sqs", "SendMessage"): 1,
            }
        )
        api_walls.append(wall)
    messages = receive(handler.runtime.clients.sqs, resources.queue_url)
    assert len(messages) == 2
    ran, wall, seen = metered.invoke("QueueWorkerFunction", batch(messages), 900)
    assert ran.result == {"batchItemFailures": []}
    assert seen == Counter({("dynamodb", "UpdateItem"): 6, ("kms", "Decrypt"): 2})

    estimates = [_estimate(traingate, rid) for rid in ids]
    for estimate, api_wall in zip(estimates, api_walls, strict=True):
        assert estimate["usd"] == pytest.approx(docs_usd(estimate, PRICES), rel=1e-12)
        assert (estimate["function"], estimate["hand_off"]) == ("queue-worker", "queue")
        part = estimate["lambda"]["queue-worker"]
        _part(part, wall=wall, init=0.0, batch_size=2)
        assert 0 < estimate["lambda"]["api"]["seconds"] <= api_wall
        # Its share of the invocation's request; the SendMessage its message proves and half
        # the batch's receive and delete; the Encrypt at init and the Decrypt in the worker.
        assert estimate["units"] == _units(
            lambda_request=1.0 + 1 / 2,
            http_api_request=1.0,
            dynamodb_write_unit=4.0 + 2.0,
            sqs_request=1.0 + 2 / 2,
            kms_request=2.0,
        )
    # The batch's shares add up to (at most) the invocation's duration.
    shares = [full.usage.functions["queue-worker"].seconds for _, full in metered.sink.got]
    assert len(shares) == 2
    assert sum(shares) <= wall


class RaisingCalculator(CalculatorAgent):
    async def run(self, ctx: RolloutContext) -> RolloutResult:
        raise RuntimeError("the calculator's environment exploded")


@pytest.mark.parametrize("outcome", ["success", "agent_error", "infrastructure"])
def test_every_final_response_carries_its_estimate_beside_its_failure(
    handler: Any, metered: Metered, standin: tuple[TrainGateStandIn, str], outcome: str
) -> None:
    traingate, url = standin
    # Its own rollout id: the cases' tables share a name (the fixture cuts it to 40 characters).
    rid = f"cost-{outcome}"
    accepted, _, _ = metered.invoke("ApiFunction", _init_event(url, rid), 29)
    if outcome == "agent_error":
        handler.runtime.worker.agent_loop = RaisingCalculator()
    elif outcome == "infrastructure":
        handler.runtime.settings.client.max_retries = 0
        traingate.inject("chat", Fault(503, count=5))  # TrainGate fails the agent's chat call
    metered.invoke("WorkerFunction", accepted.dispatched[0], 900)
    (report,) = traingate.completions[rid]
    kit = report["extra_fields"]["rollout_sdk"]
    print(f"\n{outcome}: extra_fields = {json.dumps(report['extra_fields'])}")
    expected = {"success": None, "agent_error": "agent_error", "infrastructure": "infrastructure"}
    assert (kit.get("failure") or {}).get("category") == expected[outcome]
    assert report["status"] == ("COMPLETED" if outcome == "success" else "ERROR")
    estimate = kit["cost"]
    assert estimate["at"] == "finish"
    assert set(estimate["lambda"]) == {"api", "worker"}
    assert estimate["usd"] == pytest.approx(docs_usd(estimate, PRICES), rel=1e-12)


def test_the_full_figure_grows_with_the_callback_attempts_and_the_re_drive(
    handler: Any, metered: Metered, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    handler.runtime.settings.client.retry_base_delay = 0.05
    handler.runtime.settings.client.retry_max_delay = 0.1
    accepted, _, _ = metered.invoke("ApiFunction", _init_event(url), 29)
    traingate.inject("completed", Fault(503, count=3))  # every attempt of the worker fails
    ran, _, seen = metered.invoke("WorkerFunction", accepted.dispatched[0], 900)
    assert ran.result["state"] == "FINISHED"
    assert seen == Counter({("dynamodb", "UpdateItem"): 3, ("kms", "Encrypt"): 1})
    assert metered.sink.got == []  # parked, not final: no metric yet

    parked = _record(handler)
    response = parked.response or {}
    at_finish = response["extra_fields"]["rollout_sdk"]["cost"]
    figure = parked.extra["cost"]
    # Three callback attempts, two backoffs, and the Encrypt that sealed the key for the
    # re-drive, after the figure at finish (the park's own write is not in its figure). The
    # backoffs are jittered ("equal jitter": at least half of 0.05 s, then of 0.1 s), so the
    # figure grows by at least their floor whatever the attempts themselves take.
    retry = handler.runtime.settings.client
    floor = sum(min(retry.retry_base_delay * 2**n, retry.retry_max_delay) / 2 for n in range(2))
    assert figure["lambda"]["worker"]["seconds"] >= at_finish["lambda"]["worker"]["seconds"] + floor
    assert figure["units"]["kms_request"] == 1.0
    assert figure["units"]["dynamodb_write_unit"] == 4.0 + 2.0 * 2
    assert figure["usd"] > at_finish["usd"]

    # The re-drive delivers it; its part is added, and the sink gets the full figure once.
    runtime = handler.runtime
    assert runtime.loop.run_until_complete(park_due_now(runtime.store, parked, time.time())).applied
    redriven, redrive_wall, seen = metered.invoke(
        "RedriveFunction", load_event(EVENTS / "redrive.json"), 600
    )
    assert redriven.result["delivered"] == 1
    assert seen[("kms", "Decrypt")] == 1
    ((record, full),) = metered.sink.got
    assert record.state == RecordState.DELIVERED
    figures = full.to_json()
    assert figures["usd"] == pytest.approx(docs_usd(figures, PRICES), rel=1e-12)
    assert (full.function, full.hand_off) == ("redrive", "direct")
    assert set(figures["lambda"]) == {"api", "worker", "redrive"}
    assert 0 < figures["lambda"]["redrive"]["seconds"] <= redrive_wall
    assert figures["lambda"]["worker"]["seconds"] == figure["lambda"]["worker"]["seconds"]
    # The re-drive's consistent read, its reclaim and delivered writes, and the Decrypt.
    assert figures["units"]["dynamodb_read_unit"] == 1.0
    assert figures["units"]["dynamodb_write_unit"] == 4.0 + 2.0 * 2 + 2.0 * 2
    assert figures["units"]["kms_request"] == 2.0
    assert figures["units"]["lambda_request"] == 2.0  # the schedule's own request is fixed cost
    assert full.usd > figure["usd"]
    assert _record(handler).extra["cost"]["usd"] < full.usd  # the record's misses its own write


@pytest.fixture
def priced_handler(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Any]:
    monkeypatch.setenv("ROLLOUT_SDK_PRICES", json.dumps(OVERRIDES))
    yield request.getfixturevalue("handler")


OVERRIDES = {
    "lambda_gb_second_x86_64": 0.00002,
    "lambda_gb_second_arm64": 0.00002,
    "lambda_request": 0,
}


def test_the_prices_setting_prices_the_estimate(
    priced_handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    accepted = invoke(priced_handler, "ApiFunction", _init_event(url), timeout_seconds=29)
    invoke(priced_handler, "WorkerFunction", accepted.dispatched[0], timeout_seconds=900)
    estimate = _estimate(traingate)
    assert estimate["prices"] == PRICES_READ + "+overrides"
    overridden = effective_prices(OVERRIDES)
    assert estimate["usd"] == pytest.approx(docs_usd(estimate, overridden), rel=1e-12)
    assert estimate["usd"] != pytest.approx(docs_usd(estimate, PRICES), rel=1e-6)


def test_a_request_offloaded_to_s3_is_charged_its_puts_and_gets(
    handler: Any, metered: Metered, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    event = _init_event(url)
    body = json.loads(event["body"])
    body["metadata"] = just_under_the_metadata_limit()  # incompressible: the request goes to S3
    event["body"] = json.dumps(body)
    accepted, _, api_seen = metered.invoke("ApiFunction", event, 29)
    assert accepted.result["statusCode"] == 202
    _, _, worker_seen = metered.invoke("WorkerFunction", accepted.dispatched[0], 900)
    puts, gets = api_seen[("s3", "PutObject")], worker_seen[("s3", "GetObject")]
    assert puts >= 1 and gets >= 1
    at_finish = _estimate(traingate)
    assert at_finish["units"]["http_api_request"] == 3.0  # a 1 MiB body: three 512 KB units
    assert at_finish["units"]["s3_put_request"] == puts
    assert 1 <= at_finish["units"]["s3_get_request"] <= gets  # the claim read it back, so far
    ((_, full),) = metered.sink.got
    assert full.usage.units["s3_put_request"] == puts
    assert full.usage.units["s3_get_request"] == gets  # every move that read it back
    assert full.usd == pytest.approx(docs_usd(full.to_json(), PRICES), rel=1e-12)
