"""The ``Store`` contract: every implementation must pass every test here (see conftest.py)."""

from __future__ import annotations

import asyncio
import math

from rollout_sdk.store.base import Store
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry

from .records import NOW, SEALED, TOOL, TTL, claim, make_record, reach

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


async def _refused(
    store: Store, holder: RolloutRecord, other: RolloutRecord, on: str, *, now: float = NOW
) -> None:
    """``other``, created at ``now`` after ``holder``, is refused on ``on``: the holder answers."""
    await store.create(holder, now=NOW)
    result = await store.create(other, now=now)
    assert result.created is False
    assert result.conflict_on == on
    assert result.record == holder


async def test_create_conflict_by_slot_returns_the_holder(store: Store) -> None:
    original = make_record()
    await _refused(store, original, make_record(now=NOW + 5), "slot", now=NOW + 5)
    assert await store.get("r-1", now=NOW + 5) == original


async def test_create_conflict_by_slot_with_another_rollout_id(store: Store) -> None:
    await _refused(store, make_record("r-1", key="k"), make_record("r-2", key="k"), "slot")
    assert await store.get("r-2", now=NOW) is None


async def test_create_conflict_by_rollout_id_under_another_key(store: Store) -> None:
    await _refused(store, make_record("r-1", key="k1"), make_record("r-1", key="k2"), "rollout_id")
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


# --------------------------------------------------------------------------- the due index


async def _park(store: Store, rollout_id: str, *, due: float) -> None:
    await reach(store, RecordState.FINISHED, rollout_id)
    parked = await store.park(
        rollout_id,
        attempt=1,
        error="503",
        next_attempt_at=due,
        delivery_attempts=1,
        expires_at=expiry(NOW + 3, 10 * TTL),
        now=NOW + 3,
    )
    assert parked.applied


async def _listed(
    store: Store, *, now: float, until: float | None = None, limit: int = 7
) -> list[str]:
    """Every id :meth:`Store.due` lists, page by page."""
    ids: list[str] = []
    cursor = None
    while True:
        page = await store.due(now=now, until=until, limit=limit, after=cursor)
        assert len(page.rollout_ids) <= limit
        ids.extend(page.rollout_ids)
        if page.cursor is None:
            return ids
        cursor = page.cursor


async def test_the_due_index_lists_only_what_waits_and_only_once_due(store: Store) -> None:
    # Records that wait for nothing (in flight on their own, or final) are not in it.
    await reach(store, RecordState.ACCEPTED, "accepted")
    await reach(store, RecordState.RUNNING, "running")
    await reach(store, RecordState.FINISHED, "finished")
    await reach(store, RecordState.DELIVERED, "delivered")
    await reach(store, RecordState.UNDELIVERABLE, "undeliverable")
    for offset, rid in enumerate(("p-early", "p-mid", "p-late")):
        await _park(store, rid, due=NOW + 10 + offset * 10)
    assert await _listed(store, now=NOW + 5) == []
    # Earliest first within a partition; DynamoDB spreads records over several.
    assert sorted(await _listed(store, now=NOW + 20)) == ["p-early", "p-mid"]
    assert sorted(await _listed(store, now=NOW + 100)) == ["p-early", "p-late", "p-mid"]
    # Delivered, it leaves the index.
    delivered = await store.deliver(
        "p-mid", attempt=1, delivery_attempts=2, expires_at=expiry(NOW + 30, TTL), now=NOW + 30
    )
    assert delivered.record is not None and delivered.record.due_at is None
    assert sorted(await _listed(store, now=NOW + 100)) == ["p-early", "p-late"]


async def test_the_due_index_pages_through_every_entry_once(store: Store) -> None:
    for i in range(23):
        await _park(store, f"p-{i:02d}", due=NOW + 10 + (i % 5))
    listed = await _listed(store, now=NOW + 50, limit=4)
    assert sorted(listed) == [f"p-{i:02d}" for i in range(23)]


async def test_a_watched_lease_is_due_when_it_runs_out(store: Store) -> None:
    await store.create(make_record().evolve(sealed_key=SEALED), now=NOW)
    claimed = await store.claim(
        "r-1", attempt=1, lease_until=NOW + 60, expires_at=expiry(NOW, TTL), now=NOW, watch=True
    )
    assert claimed.record is not None and claimed.record.due_at == NOW + 60
    assert await _listed(store, now=NOW + 59) == []
    assert await _listed(store, now=NOW + 60) == ["r-1"]
    # A renewal moves the due time with the lease; an unwatched one leaves it.
    renewed = await store.renew(
        "r-1", state=RecordState.RUNNING, attempt=1, lease_until=NOW + 90, now=NOW + 30, watch=True
    )
    assert renewed.record is not None and renewed.record.due_at == NOW + 90
    assert await _listed(store, now=NOW + 60) == []
    # Unwatched, nothing is due: the claim takes it out of the index.
    await store.create(make_record("plain"), now=NOW)
    plain = await store.claim(
        "plain", attempt=1, lease_until=NOW + 60, expires_at=expiry(NOW, TTL), now=NOW
    )
    assert plain.record is not None and plain.record.due_at is None
    assert await _listed(store, now=NOW + 500) == ["r-1"]


async def test_a_duplicates_hand_off_lease_bounds_hand_offs_and_is_due_when_it_ends(
    store: Store,
) -> None:
    await store.create(make_record(), now=NOW)
    first = await store.mark_handoff(
        "r-1", count=1, lease_until=NOW + 60, sealed_key=SEALED, now=NOW, watch=True
    )
    assert first.applied and first.record is not None
    assert (first.record.due_at, first.record.sealed_key) == (NOW + 60, SEALED)
    # Untold, a hand-off lease is not watched, sealed key or not: every move that takes a lease
    # has one default (the engine's one rule, Leases.watches, tells each).
    await store.create(make_record("untold"), now=NOW)
    untold = await store.mark_handoff(
        "untold", count=1, lease_until=NOW + 60, sealed_key=SEALED, now=NOW
    )
    assert untold.applied and untold.record is not None
    assert (untold.record.due_at, untold.record.sealed_key) == (None, SEALED)
    # A second hand-off within the lease is refused: at most one extra per lease.
    again = await store.mark_handoff("r-1", count=2, lease_until=NOW + 90, now=NOW + 30)
    assert (again.applied, again.record) == (False, first.record)
    assert await _listed(store, now=NOW + 60) == ["r-1"]
    # It succeeded: out of the index, the lease kept (no hand-off before it ends).
    done = await store.handed_off("r-1", expires_at=first.record.expires_at, now=NOW + 1)
    assert done.record is not None and done.record.due_at is None
    assert done.record.lease_until == NOW + 60
    assert await _listed(store, now=NOW + 500) == []
    later = await store.mark_handoff(
        "r-1", count=2, lease_until=NOW + 200, now=NOW + 61, watch=True
    )
    assert later.applied and later.record is not None and later.record.handoffs == 2
    # The claim takes it out of the index and the hand-off lease over.
    claimed = await store.claim(
        "r-1", attempt=1, lease_until=NOW + 120, expires_at=expiry(NOW, TTL), now=NOW + 62
    )
    assert claimed.record is not None and claimed.record.due_at is None
    assert await _listed(store, now=NOW + 500) == []


async def test_a_reclaim_due_by_a_time_takes_only_a_due_response(store: Store) -> None:
    await _park(store, "parked", due=NOW + 50)
    early = await store.reclaim_delivery(
        "parked", attempt=1, lease_until=NOW + 100, now=NOW + 40, due_by=NOW + 40
    )
    assert early.applied is False
    due = await store.reclaim_delivery(
        "parked", attempt=1, lease_until=NOW + 110, now=NOW + 50, due_by=NOW + 50, watch=True
    )
    assert due.applied and due.record is not None
    assert (due.record.attempt, due.record.due_at) == (2, NOW + 110)


async def test_an_owners_store_lists_every_record_in_flight(owned_store: Store) -> None:
    store = owned_store
    for state in RecordState:
        await reach(store, state, f"r-{state.value.lower()}")
    # Everything in flight is listed for the owner's restart sweep; nothing final.
    assert sorted(await _listed(store, now=NOW + 200, until=math.inf)) == [
        "r-accepted",
        "r-finished",
        "r-running",
    ]
    # An idle ACCEPTED record is due only at its expiry; the leases that ran out are due now.
    assert sorted(await _listed(store, now=NOW + 200)) == ["r-finished", "r-running"]


async def test_the_pass_lease_admits_one_holder_at_a_time(store: Store) -> None:
    assert await store.acquire_pass("redrive", holder="a", until=NOW + 60, now=NOW)
    assert not await store.acquire_pass("redrive", holder="b", until=NOW + 70, now=NOW + 10)
    await store.release_pass("redrive", holder="b")  # not b's: nothing happens
    assert not await store.acquire_pass("redrive", holder="b", until=NOW + 70, now=NOW + 10)
    await store.release_pass("redrive", holder="a")
    assert await store.acquire_pass("redrive", holder="b", until=NOW + 70, now=NOW + 11)
    # A holder that died: its lease runs out and the next pass takes it.
    assert await store.acquire_pass("redrive", holder="c", until=NOW + 200, now=NOW + 71)


async def test_an_idempotency_slot_lives_as_long_as_its_record(store: Store) -> None:
    """The record's moves extend its life past its first TTL; its slot must hold as long."""
    await store.create(
        make_record("r-1", key="k", ttl=60), now=NOW, slot_expires_at=expiry(NOW, 10 * TTL)
    )
    claimed = await store.claim(
        "r-1", attempt=1, lease_until=NOW + 60, expires_at=expiry(NOW, TTL), now=NOW + 1
    )
    assert claimed.applied
    # Past the record's first expiry, within its new one: the key still names r-1.
    again = await store.create(make_record("r-2", key="k", now=NOW + 100), now=NOW + 100)
    assert (again.created, again.conflict_on) == (False, "slot")
    assert again.record.rollout_id == "r-1"


async def test_a_slot_whose_record_is_gone_is_free(store: Store) -> None:
    await store.create(
        make_record("r-1", key="k", ttl=60), now=NOW, slot_expires_at=expiry(NOW, 10 * TTL)
    )
    # r-1 expired at NOW + 60; its slot is kept longer, but names a record that is gone.
    fresh = await store.create(make_record("r-2", key="k", now=NOW + 100), now=NOW + 100)
    assert fresh.created
    duplicate = await store.create(make_record("r-3", key="k", now=NOW + 101), now=NOW + 101)
    assert (duplicate.created, duplicate.record.rollout_id) == (False, "r-2")


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
