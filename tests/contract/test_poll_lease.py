"""An osmosis-ai 0.3.8 rollout's record on every ``Store``: its protocol and polling lease kept
as written, and ``renew_poll``, the move each result poll makes (see conftest.py)."""

from __future__ import annotations

import pytest

from rollout_sdk.store.base import Store, TransitionResult
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, PROTOCOL_V1, RecordState, RolloutRecord

from .records import NOW, RESPONSE, claim, make_record, reach

pytestmark = pytest.mark.timeout(120)


def _pulled(rollout_id: str, *, until: float | None) -> RolloutRecord:
    return make_record(rollout_id).evolve(
        protocol=PROTOCOL_OSMOSIS03, poll_digest="d" * 64, poll_until=until
    )


async def _finish(store: Store, rollout_id: str) -> TransitionResult:
    """The claimed rollout's final move (attempt 1)."""
    return await store.finish(
        rollout_id,
        attempt=1,
        response=RESPONSE,
        lease_until=NOW + 62,
        expires_at=int(NOW + 900),
        now=NOW + 2,
    )


async def test_a_pulled_record_keeps_its_protocol_and_lease_as_written(store: Store) -> None:
    written = _pulled("pulled-1", until=NOW + 120)
    assert (await store.create(written, now=NOW)).created
    read = await store.get("pulled-1", now=NOW)
    assert read is not None
    assert (read.protocol, read.poll_digest, read.poll_until) == (
        PROTOCOL_OSMOSIS03,
        "d" * 64,
        NOW + 120,
    )
    # A record written before the field (or a v1 one) reads as v1's.
    assert (await reach(store, RecordState.ACCEPTED, "v1-1")).protocol == PROTOCOL_V1


async def test_each_poll_renews_a_live_lease_queued_or_running(store: Store) -> None:
    for rollout_id, running in (("queued-1", False), ("running-1", True)):
        await store.create(_pulled(rollout_id, until=NOW + 120), now=NOW)
        if running:
            await claim(store, rollout_id)
        renewed = await store.renew_poll(rollout_id, until=NOW + 150, now=NOW + 30)
        assert renewed.applied and renewed.record is not None
        assert renewed.record.poll_until == NOW + 150
        assert (await store.get(rollout_id, now=NOW + 30)) == renewed.record


async def test_a_lease_that_ran_out_stays_out(store: Store) -> None:
    await store.create(_pulled("out-1", until=NOW + 10), now=NOW)
    late = await store.renew_poll("out-1", until=NOW + 131, now=NOW + 11)
    assert late.applied is False
    assert late.record is not None and late.record.poll_until == NOW + 10


async def test_a_record_without_a_lease_or_final_is_not_renewed(store: Store) -> None:
    v1 = await reach(store, RecordState.RUNNING, "v1-running")
    assert (await store.renew_poll(v1.rollout_id, until=NOW + 200, now=NOW + 5)).applied is False
    await store.create(_pulled("final-1", until=NOW + 1000), now=NOW)
    await claim(store, "final-1")
    await _finish(store, "final-1")
    assert (await store.renew_poll("final-1", until=NOW + 200, now=NOW + 5)).applied is False
    assert (await store.renew_poll("absent", until=NOW + 200, now=NOW + 5)).record is None


async def _all_polled(store: Store, **options: object) -> list[str]:
    """Every id the live index lists with ``options``, page by page (two at a time)."""
    ids: list[str] = []
    after = None
    while True:
        page = await store.polled(now=NOW, limit=2, after=after, **options)  # type: ignore[arg-type]
        ids.extend(page.rollout_ids)
        if page.cursor is None:
            return ids
        after = page.cursor


async def test_the_live_index_lists_pulled_rollouts_in_flight_by_lease_end(store: Store) -> None:
    for rollout_id, until in (("job-b", 130.0), ("job-a", 140.0), ("other-c", 110.0)):
        await store.create(_pulled(rollout_id, until=NOW + until), now=NOW)
    await claim(store, "job-a")
    await reach(store, RecordState.RUNNING, "v1-running")  # no lease: never listed
    # Listed earliest lease end first, in pages; by prefix; by a lease that ran out.
    assert await _all_polled(store) == ["other-c", "job-b", "job-a"]
    assert await _all_polled(store, prefix="job-") == ["job-b", "job-a"]
    assert await _all_polled(store, ended_by=NOW + 135) == ["other-c", "job-b"]
    assert await _all_polled(store, ended_by=NOW + 135, prefix="job") == ["job-b"]
    assert await _all_polled(store, prefix="none") == []
    assert await store.count_polled(now=NOW) == 3
    # A renewed lease moves in the index; the final move takes the rollout out of it.
    await store.renew_poll("other-c", until=NOW + 150, now=NOW + 1)
    assert await _all_polled(store) == ["job-b", "job-a", "other-c"]
    finished = await _finish(store, "job-a")
    assert finished.record is not None and finished.record.poll_until is None
    assert await _all_polled(store) == ["job-b", "other-c"]
    assert await store.count_polled(now=NOW + 2) == 2


async def test_a_poll_records_the_status_it_answered(store: Store) -> None:
    await store.create(_pulled("seen-1", until=NOW + 120), now=NOW)
    assert (await store.get("seen-1", now=NOW)).poll_seen is None  # type: ignore[union-attr]
    renewed = await store.renew_poll("seen-1", until=NOW + 140, now=NOW + 20, seen="running")
    assert renewed.record is not None and renewed.record.poll_seen == "running"
    # A renewal that answers no new status keeps the one recorded.
    again = await store.renew_poll("seen-1", until=NOW + 160, now=NOW + 40)
    assert again.record is not None and again.record.poll_seen == "running"
    assert again.record == await store.get("seen-1", now=NOW + 40)
