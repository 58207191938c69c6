"""An osmosis-ai 0.3.8 rollout's record on every ``Store``: its protocol and polling lease kept
as written, and ``renew_poll``, the move each result poll makes (see conftest.py)."""

from __future__ import annotations

import pytest

from rollout_sdk.store.base import Store
from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, PROTOCOL_V1, RecordState, RolloutRecord

from .records import NOW, RESPONSE, claim, make_record, reach

pytestmark = pytest.mark.timeout(120)


def _pulled(rollout_id: str, *, until: float | None) -> RolloutRecord:
    return make_record(rollout_id).evolve(
        protocol=PROTOCOL_OSMOSIS03, poll_digest="d" * 64, poll_until=until
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
    await store.finish(
        "final-1",
        attempt=1,
        response=RESPONSE,
        lease_until=NOW + 62,
        expires_at=int(NOW + 900),
        now=NOW + 2,
    )
    assert (await store.renew_poll("final-1", until=NOW + 200, now=NOW + 5)).applied is False
    assert (await store.renew_poll("absent", until=NOW + 200, now=NOW + 5)).record is None
