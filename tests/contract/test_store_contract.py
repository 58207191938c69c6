"""The ``Store`` contract: every implementation must pass every test here (see conftest.py)."""

from __future__ import annotations

import asyncio

from rollout_sdk.engine.record import RecordState, expiry
from rollout_sdk.store.base import Store

from .records import NOW, TOOL, TTL, claim, make_record

# --------------------------------------------------------------------------- create / get


def test_implements_the_store_protocol(store: Store) -> None:
    assert isinstance(store, Store)


async def test_create_then_get_returns_the_same_record(store: Store) -> None:
    record = make_record()
    result = await store.create(record, now=NOW)
    assert result.created is True
    assert result.conflict_on is None
    assert result.record == record
    got = await store.get("r-1", now=NOW)
    assert got == record
    assert got is not None
    assert got.state == RecordState.ACCEPTED
    assert got.init_response_model().tools == [TOOL]
    assert got.rollout_request().metadata == {"ground_truth": 4, "nested": {"list": [1, 2.5, None]}}


async def test_the_callback_key_is_not_stored(store: Store) -> None:
    await store.create(make_record(), now=NOW)
    got = await store.get("r-1", now=NOW)
    assert got is not None
    assert "never-stored" not in repr(got.to_dict())


async def test_get_absent_is_none(store: Store) -> None:
    assert await store.get("nobody", now=NOW) is None


async def test_every_field_round_trips(store: Store) -> None:
    # Every field away from its default (the moves' own round trips: test_store_moves.py).
    record = make_record().evolve(
        attempt=2,
        lease_until=NOW + 60.5,
        response={"rollout_id": "r-1", "status": "ERROR", "final_messages": [{"a": None}]},
        cancel_requested=True,
        updated_at=NOW + 2.25,
        expires_at=int(NOW) + 901,  # whole epoch seconds, as DynamoDB TTL wants
        finished_at=NOW + 2.125,
        delivered_at=NOW + 2.5,
        delivery_attempts=3,
        next_attempt_at=NOW + 30.125,
        last_error="TrainGate answered 503: ünavailable",
        handoffs=2,
        sealed_key="c2VhbGVk",
        extra={"trace": ["x", 1, {"y": False}]},
    )
    assert (await store.create(record, now=NOW)).created
    assert await store.get("r-1", now=NOW + 3) == record


async def test_create_conflict_by_slot_returns_the_holder(store: Store) -> None:
    original = make_record()
    await store.create(original, now=NOW)
    again = await store.create(make_record(now=NOW + 5), now=NOW + 5)
    assert again.created is False
    assert again.conflict_on == "slot"
    assert again.record == original
    assert await store.get("r-1", now=NOW + 5) == original


async def test_create_conflict_by_slot_with_another_rollout_id(store: Store) -> None:
    holder = make_record("r-1", key="k")
    await store.create(holder, now=NOW)
    result = await store.create(make_record("r-2", key="k"), now=NOW)
    assert result.created is False
    assert result.conflict_on == "slot"
    assert result.record == holder
    assert await store.get("r-2", now=NOW) is None


async def test_create_conflict_by_rollout_id_under_another_key(store: Store) -> None:
    holder = make_record("r-1", key="k1")
    await store.create(holder, now=NOW)
    result = await store.create(make_record("r-1", key="k2"), now=NOW)
    assert result.created is False
    assert result.conflict_on == "rollout_id"
    assert result.record == holder
    with_no_key = await store.create(make_record("r-1"), now=NOW)
    assert (with_no_key.created, with_no_key.conflict_on) == (False, "rollout_id")


async def test_rollout_ids_and_explicit_keys_do_not_collide(store: Store) -> None:
    first = await store.create(make_record("r-1"), now=NOW)
    second = await store.create(make_record("r-2", key="r-1"), now=NOW)
    assert (first.created, second.created) == (True, True)
    assert await store.get("r-1", now=NOW) == first.record
    assert await store.get("r-2", now=NOW) == second.record


async def test_conflict_reports_a_live_holder_even_if_it_moved_on(store: Store) -> None:
    await store.create(make_record(), now=NOW)
    running = await claim(store)
    result = await store.create(make_record(now=NOW + 2), now=NOW + 2)
    assert result.created is False
    assert result.record == running


# --------------------------------------------------------------------------- expiry


async def test_expired_record_reads_as_absent(store: Store) -> None:
    record = make_record()
    await store.create(record, now=NOW)
    assert await store.get("r-1", now=NOW + TTL - 0.001) == record
    assert await store.get("r-1", now=NOW + TTL) is None
    assert await store.get("r-1", now=NOW + TTL + 3600) is None


async def test_expired_record_can_be_taken_over_by_its_slot(store: Store) -> None:
    await store.create(make_record("r-1", key="k"), now=NOW)
    later = NOW + TTL + 1
    successor = make_record("r-2", key="k", now=later)
    result = await store.create(successor, now=later)
    assert result.created is True
    assert await store.get("r-2", now=later) == successor
    assert await store.get("r-1", now=later) is None
    again = await store.create(make_record("r-3", key="k", now=later), now=later)
    assert (again.created, again.conflict_on, again.record) == (False, "slot", successor)


async def test_expired_record_can_be_taken_over_by_its_rollout_id(store: Store) -> None:
    await store.create(make_record("r-1", key="k1"), now=NOW)
    later = NOW + TTL + 1
    successor = make_record("r-1", key="k2", now=later)
    assert (await store.create(successor, now=later)).created is True
    assert await store.get("r-1", now=later) == successor
    # The expired record's slot is free too.
    assert (await store.create(make_record("r-9", key="k1", now=later), now=later)).created


async def test_the_same_request_after_expiry_is_a_new_rollout(store: Store) -> None:
    await store.create(make_record(), now=NOW)
    await claim(store)
    later = NOW + TTL + 1
    fresh = make_record(now=later)
    assert (await store.create(fresh, now=later)).created is True
    got = await store.get("r-1", now=later)
    assert got == fresh
    assert got is not None
    assert got.state == RecordState.ACCEPTED


async def test_expiry_is_extended_by_a_move(store: Store) -> None:
    await store.create(make_record(), now=NOW)
    claimed = await store.claim(
        "r-1", attempt=1, lease_until=NOW + 60, expires_at=expiry(NOW + 1, 10 * TTL), now=NOW + 1
    )
    assert claimed.applied
    assert await store.get("r-1", now=NOW + 5 * TTL) is not None


# --------------------------------------------------------------------------- release


async def test_release_deletes_an_accepted_record_of_that_slot(store: Store) -> None:
    record = make_record(key="k")
    await store.create(record, now=NOW)
    assert await store.release("r-1", slot=record.slot, now=NOW + 1) is True
    assert await store.get("r-1", now=NOW + 1) is None
    # Slot and id are free again: TrainGate's retry of the same init starts afresh.
    assert (await store.create(make_record(key="k", now=NOW + 2), now=NOW + 2)).created
    assert await store.release("r-1", slot=record.slot, now=NOW + 3) is True
    assert await store.release("r-1", slot=record.slot, now=NOW + 3) is False


async def test_release_with_another_slot_keeps_the_record(store: Store) -> None:
    record = make_record(key="k")
    await store.create(record, now=NOW)
    assert await store.release("r-1", slot="key:other", now=NOW) is False
    assert await store.release("r-1", slot="rid:r-1", now=NOW) is False
    assert await store.get("r-1", now=NOW) == record


async def test_release_keeps_a_record_that_moved_on(store: Store) -> None:
    record = make_record()
    await store.create(record, now=NOW)
    running = await claim(store)
    assert await store.release("r-1", slot=record.slot, now=NOW + 2) is False
    assert await store.get("r-1", now=NOW + 2) == running


async def test_release_of_an_absent_or_expired_record(store: Store) -> None:
    assert await store.release("ghost", slot="rid:ghost", now=NOW) is False
    record = make_record()
    await store.create(record, now=NOW)
    assert await store.release("r-1", slot=record.slot, now=NOW + TTL + 1) is False


# --------------------------------------------------------------------------- scan


async def test_scan_by_state_oldest_update_first_with_limit(store: Store) -> None:
    # Created out of order; updated_at decides the order.
    for offset in (3, 0, 4, 1, 2):
        await store.create(make_record(f"r-{offset}", now=NOW + offset), now=NOW + offset)
    now = NOW + 10
    accepted = await store.scan((RecordState.ACCEPTED,), now=now)
    assert [r.rollout_id for r in accepted] == ["r-0", "r-1", "r-2", "r-3", "r-4"]
    limited = await store.scan((RecordState.ACCEPTED,), now=now, limit=2)
    assert [r.rollout_id for r in limited] == ["r-0", "r-1"]

    await claim(store, "r-3", now=NOW + 5)
    await claim(store, "r-0", now=NOW + 6)
    running = await store.scan((RecordState.RUNNING,), now=now)
    assert [r.rollout_id for r in running] == ["r-3", "r-0"]
    assert all(r.state == RecordState.RUNNING for r in running)
    still_accepted = await store.scan((RecordState.ACCEPTED,), now=now)
    assert [r.rollout_id for r in still_accepted] == ["r-1", "r-2", "r-4"]
    both = await store.scan((RecordState.RUNNING, RecordState.ACCEPTED), now=now, limit=4)
    assert [r.rollout_id for r in both] == ["r-1", "r-2", "r-4", "r-3"]
    assert await store.scan((RecordState.FINISHED, RecordState.DELIVERED), now=now) == []


async def test_scan_returns_full_records(store: Store) -> None:
    record = make_record()
    await store.create(record, now=NOW)
    assert await store.scan((RecordState.ACCEPTED,), now=NOW) == [record]


async def test_scan_skips_expired_records(store: Store) -> None:
    await store.create(make_record("old", now=NOW, ttl=60), now=NOW)
    await store.create(make_record("new", now=NOW + 30, ttl=600), now=NOW + 30)
    found = await store.scan((RecordState.ACCEPTED,), now=NOW + 60)
    assert [r.rollout_id for r in found] == ["new"]


async def test_scan_of_many_records_pages_by_limit(store: Store) -> None:
    for i in range(30):
        await store.create(make_record(f"r-{i:02d}", now=NOW + i), now=NOW + i)
    first = await store.scan((RecordState.ACCEPTED,), now=NOW + 100, limit=25)
    assert [r.rollout_id for r in first] == [f"r-{i:02d}" for i in range(25)]
    everything = await store.scan((RecordState.ACCEPTED,), now=NOW + 100)
    assert len(everything) == 30


# --------------------------------------------------------------------------- races


async def test_concurrent_creates_of_the_same_record_create_exactly_one(store: Store) -> None:
    record = make_record()
    results = await asyncio.gather(*(store.create(record, now=NOW) for _ in range(50)))
    assert sum(r.created for r in results) == 1
    losers = [r for r in results if not r.created]
    assert len(losers) == 49
    assert all(r.conflict_on == "slot" and r.record == record for r in losers)
    assert await store.get("r-1", now=NOW) == record


async def test_concurrent_creates_competing_for_one_slot_create_exactly_one(
    store: Store,
) -> None:
    candidates = [make_record(f"r-{i}", key="shared") for i in range(50)]
    results = await asyncio.gather(*(store.create(c, now=NOW) for c in candidates))
    winners = [r.record for r in results if r.created]
    assert len(winners) == 1
    assert all(r.record == winners[0] for r in results)
    present = [await store.get(c.rollout_id, now=NOW) for c in candidates]
    assert [p for p in present if p is not None] == winners


async def test_concurrent_claims_of_one_record_exactly_one_wins(store: Store) -> None:
    await store.create(make_record(), now=NOW)

    async def try_claim(attempt: int) -> tuple[int, bool]:
        result = await store.claim(
            "r-1",
            attempt=attempt,
            lease_until=NOW + attempt,
            expires_at=int(NOW) + 900,
            now=NOW + 1,
        )
        return attempt, result.applied

    outcomes = await asyncio.gather(*(try_claim(a) for a in range(1, 21)))
    winners = [attempt for attempt, applied in outcomes if applied]
    assert len(winners) == 1
    stored = await store.get("r-1", now=NOW + 1)
    assert stored is not None
    assert stored.state == RecordState.RUNNING
    assert stored.attempt == winners[0]
    assert stored.lease_until == NOW + winners[0]


async def test_the_sealed_key_round_trips_and_is_not_in_the_repr(store: Store) -> None:
    record = make_record().evolve(sealed_key="c2VhbGVk")
    await store.create(record, now=NOW)
    got = await store.get("r-1", now=NOW)
    assert got is not None and got.sealed_key == "c2VhbGVk"
    assert "c2VhbGVk" not in repr(got)
