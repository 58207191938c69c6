"""The scheduled re-drive reads the due index, not the table (issue 10 item 1), on moto's server.

A pass over a table of hundreds of delivered records and a few parked ones makes no Scan, reads
only the parked ones' index entries, and sends each parked response once (counted by the
TrainGate stand-in). ``make bench`` measures the same at 1k, 10k and 100k records.
"""

from __future__ import annotations

import time
from typing import Any

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.protocol import InitResponse, RolloutRequest, RolloutResponse, RolloutStatus
from rollout_sdk.store.dynamodb import DUE_PARTITION, ROLLOUT_PREFIX, DynamoDBStore
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import CALLBACK_KEY, ROOT

EVENTS = ROOT / "events"


class Reads:
    """Every Scan and Query the store's client makes, and the items they read."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, int, int]] = []
        client.meta.events.register("after-call.dynamodb.Scan", self._seen)
        client.meta.events.register("after-call.dynamodb.Query", self._seen)

    def _seen(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, parsed.get("ScannedCount", 0), parsed.get("Count", 0)))

    def of(self, operation: str) -> list[tuple[str, int, int]]:
        return [c for c in self.calls if c[0] == operation]


def _record(rollout_id: str, url: str, now: float) -> RolloutRecord:
    request = RolloutRequest(
        rollout_id=rollout_id,
        server_url=url,
        messages=[{"role": "user", "content": "What is 1 + 1?"}],
        completion_params={},
    )
    return RolloutRecord.new(
        request, InitResponse(rollout_id=rollout_id), now=now, ttl_seconds=3600
    )


def _seed_delivered(store: DynamoDBStore, client: Any, url: str, count: int) -> None:
    now = time.time()
    response = RolloutResponse(rollout_id="x", status=RolloutStatus.COMPLETED, reward=1.0)
    items = []
    for i in range(count):
        record = _record(f"done-{i:04d}", url, now).evolve(
            state=RecordState.DELIVERED,
            response=response.model_dump(mode="json"),
            finished_at=now,
            delivered_at=now,
        )
        items.append({"PutRequest": {"Item": store._to_item(record)}})
    for start in range(0, len(items), 25):
        client.batch_write_item(RequestItems={store.table_name: items[start : start + 25]})


def seal(runtime: Any, rollout_id: str) -> str:
    """The callback key, sealed for ``rollout_id`` with the stack's KMS key."""
    sealed: str = runtime.run(runtime.vault.seal(CALLBACK_KEY, rollout_id=rollout_id))
    return sealed


async def park(store: DynamoDBStore, sealed: str, rollout_id: str, url: str) -> None:
    """Park a COMPLETED response of ``rollout_id``, due now, its record holding ``sealed``."""
    now = time.time()
    assert (await store.create(_record(rollout_id, url, now), now=now)).created
    ttl = expiry(now, 3600)
    await store.claim(rollout_id, attempt=1, lease_until=now + 60, expires_at=ttl, now=now)
    response = RolloutResponse(rollout_id=rollout_id, status=RolloutStatus.COMPLETED, reward=1.0)
    await store.finish(
        rollout_id, attempt=1, response=response, lease_until=now + 60, expires_at=ttl, now=now
    )
    parked = await store.park(
        rollout_id,
        attempt=1,
        error="503",
        next_attempt_at=now - 1,
        delivery_attempts=1,
        expires_at=ttl,
        now=now,
        sealed_key=sealed,
    )
    assert parked.applied


def _as_before_the_index(store: DynamoDBStore, client: Any, rollout_id: str) -> None:
    """Make the record's item as a table written before the due index holds it."""
    client.update_item(
        TableName=store.table_name,
        Key={"pk": {"S": ROLLOUT_PREFIX + rollout_id}},
        UpdateExpression="REMOVE #by, due_at",
        ExpressionAttributeNames={"#by": DUE_PARTITION},
    )


def test_a_pass_reads_only_what_waits_and_sends_each_once(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    store: DynamoDBStore,
) -> None:
    traingate, url = standin
    runtime = handler.runtime
    _seed_delivered(store, runtime.clients.dynamodb, url, 300)
    parked = [f"parked-{i}" for i in range(3)]
    for rid in parked:
        runtime.run(park(store, seal(runtime, rid), rid, url))
    reads = Reads(runtime.clients.dynamodb)

    first = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert first.result["delivered"] == 3
    assert reads.of("Scan") == []  # never the table
    queries = reads.of("Query")
    assert queries  # the due index, partition by partition
    assert sum(scanned for _, scanned, _ in queries) == 3  # the 3 parked, none of the 300
    assert {rid: len(traingate.completions[rid]) for rid in parked} == dict.fromkeys(parked, 1)
    assert all(not traingate.completions.get(f"done-{i:04d}") for i in range(300))

    reads.calls.clear()
    again = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert (again.result["examined"], again.result["delivered"]) == (0, 0)
    assert sum(scanned for _, scanned, _ in reads.of("Query")) == 0
    assert {rid: len(traingate.completions[rid]) for rid in parked} == dict.fromkeys(parked, 1)


def test_a_record_written_before_the_index_joins_it_when_parked(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    store: DynamoDBStore,
) -> None:
    """Items of a table made before the due index lack its partition attribute: a move that
    puts one in the index gives it one, so an upgraded stack still re-drives it."""
    traingate, url = standin
    runtime = handler.runtime
    client = runtime.clients.dynamodb
    runtime.run(park(store, seal(runtime, "old"), "old", url))
    _as_before_the_index(store, client, "old")
    assert runtime.run(store.due(now=time.time())).rollout_ids == []
    record = runtime.run(store.get("old", now=time.time()))
    assert record is not None
    now = time.time()
    runtime.run(
        store.park(
            "old",
            attempt=record.attempt,
            error="503",
            next_attempt_at=now - 1,
            delivery_attempts=1,
            expires_at=record.expires_at,
            now=now,
        )
    )
    assert runtime.run(store.due(now=time.time())).rollout_ids == ["old"]
    result = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert result.result["delivered"] == 1
    assert len(traingate.completions["old"]) == 1


def test_a_response_parked_before_the_index_is_backfilled_once_then_redriven(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    store: DynamoDBStore,
) -> None:
    traingate, url = standin
    runtime = handler.runtime
    runtime.run(park(store, seal(runtime, "parked-before"), "parked-before", url))
    # As a table written before the index holds it: parked, with no index attributes.
    _as_before_the_index(store, runtime.clients.dynamodb, "parked-before")
    _seed_delivered(store, runtime.clients.dynamodb, url, 20)
    missed = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert missed.result["examined"] == 0  # not in the index: the pass cannot see it
    filled = invoke(handler, "RedriveFunction", {"backfill_due_index": True}, timeout_seconds=600)
    assert filled.result == {"status": "done", "backfilled": 1}
    again = invoke(handler, "RedriveFunction", {"backfill_due_index": True}, timeout_seconds=600)
    assert again.result == {"status": "done", "backfilled": 0}
    sent = invoke(
        handler, "RedriveFunction", load_event(EVENTS / "redrive.json"), timeout_seconds=600
    )
    assert sent.result["delivered"] == 1
    assert len(traingate.completions["parked-before"]) == 1
