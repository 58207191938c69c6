"""``Store.create`` with a claim (init creates the record claimed for a job that starts at once):
on every store, the very record that ``create`` then ``claim`` make, in one write; a conflict
the same as without."""

from __future__ import annotations

import math

import pytest

from rollout_sdk.store.base import Claim, Store
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry

from .records import NOW, TTL, make_record

TERMS = Claim(attempt=1, lease_until=NOW + 60, expires_at=expiry(NOW, TTL + 600))


async def _two_step(store: Store, watch: bool) -> object:
    await store.create(make_record("r-2"), now=NOW)
    moved = await store.claim(
        "r-2",
        attempt=TERMS.attempt,
        lease_until=TERMS.lease_until,
        expires_at=TERMS.expires_at,
        now=NOW,
        watch=watch,
    )
    assert moved.applied
    return moved.record


@pytest.mark.parametrize("watch", [False, True], ids=["unwatched", "watched"])
async def test_a_claimed_create_is_what_create_then_claim_make(store: Store, watch: bool) -> None:
    terms = Claim(
        attempt=TERMS.attempt,
        lease_until=TERMS.lease_until,
        expires_at=TERMS.expires_at,
        watch=watch,
    )
    created = await store.create(make_record("r-1"), now=NOW, claim=terms)
    assert created.created
    got = await store.get("r-1", now=NOW)
    assert got == created.record
    assert got is not None
    assert (got.state, got.attempt, got.lease_until) == (RecordState.RUNNING, 1, NOW + 60)
    assert got.expires_at == TERMS.expires_at
    two_step = await _two_step(store, watch)
    assert isinstance(two_step, RolloutRecord)
    same = ("rollout_id", "slot", "fingerprint", "request", "init_response")  # r-2's own
    assert got.evolve(**{name: getattr(two_step, name) for name in same}) == two_step
    # In the due index exactly when a claim would have put it there (watched, or an owner's).
    due = await store.due(now=NOW, until=math.inf)
    assert ("r-1" in due.rollout_ids) == ("r-2" in due.rollout_ids)


async def test_a_claimed_create_that_conflicts_changes_nothing(store: Store) -> None:
    holder = make_record("r-1", key="k")
    assert (await store.create(holder, now=NOW)).created
    refused = await store.create(make_record("r-2", key="k"), now=NOW + 1, claim=TERMS)
    assert (refused.created, refused.conflict_on, refused.record) == (False, "slot", holder)
    assert await store.get("r-2", now=NOW + 1) is None
    assert await store.get("r-1", now=NOW + 1) == holder
    again = await store.create(make_record("r-1", key="k"), now=NOW + 1, claim=TERMS)
    assert (again.created, again.record) == (False, holder)  # the holder is not claimed


async def test_a_claimed_record_is_not_claimed_twice(store: Store) -> None:
    await store.create(make_record("r-1"), now=NOW, claim=TERMS)
    second = await store.claim(
        "r-1", attempt=1, lease_until=NOW + 61, expires_at=TERMS.expires_at, now=NOW + 1
    )
    assert not second.applied  # the claim move finds it RUNNING: only one runner
    assert second.record is not None and second.record.lease_until == NOW + 60
