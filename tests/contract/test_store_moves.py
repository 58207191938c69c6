"""The record's moves: every move, and every check it makes, on every ``Store`` (see conftest.py).

Each move is listed once in ``MOVES``, with the states it moves from and the record it must
leave; the tests below run each entry from every state, stale, expired, absent and leased.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from rollout_sdk.store.base import Guard, Store, TransitionResult, Update
from rollout_sdk.store.record import RecordState, RolloutRecord, expiry

from .records import NOW, RESPONSE, SEALED, TTL, reach

#: When the moves run: every lease :func:`reach` took has run out.
LATER = NOW + 100
KEEP = expiry(LATER, 1.5 * TTL)
ERROR = "TrainGate answered 503: ünavailable"

Call = Callable[[Store, RolloutRecord, int, float], Awaitable[TransitionResult]]
Expect = Callable[[RolloutRecord, float], RolloutRecord]


@dataclass(frozen=True)
class Move:
    """One move: how to make it (on a given attempt, at a given time) and what it must leave."""

    name: str
    from_states: tuple[RecordState, ...]
    call: Call
    expect: Expect
    checks_attempt: bool = True
    waits_for_lease: bool = False


def _finished(before: RolloutRecord, now: float, **more: Any) -> RolloutRecord:
    return before.evolve(
        state=RecordState.FINISHED,
        response=RESPONSE.model_dump(mode="json"),
        finished_at=now,
        lease_until=now + 60,
        next_attempt_at=None,
        updated_at=now,
        expires_at=KEEP,
        **more,
    )


def _delivery_over(before: RolloutRecord, now: float, **more: Any) -> RolloutRecord:
    return before.evolve(
        sealed_key=None,
        next_attempt_at=None,
        due_at=None,
        delivery_attempts=4,
        lease_until=None,
        updated_at=now,
        expires_at=KEEP,
        **more,
    )


def _renew(state: RecordState) -> Move:
    return Move(
        f"renew-{state.value.lower()}",
        (state,),
        lambda s, r, a, now: s.renew(
            r.rollout_id, state=state, attempt=a, lease_until=now + 90, now=now
        ),
        lambda before, now: before.evolve(lease_until=now + 90),
    )


MOVES = [
    Move(
        "claim",
        (RecordState.ACCEPTED,),
        lambda s, r, a, now: s.claim(
            r.rollout_id, attempt=a + 1, lease_until=now + 60, expires_at=KEEP, now=now
        ),
        lambda before, now: before.evolve(
            state=RecordState.RUNNING,
            attempt=before.attempt + 1,
            lease_until=now + 60,
            updated_at=now,
            expires_at=KEEP,
        ),
        checks_attempt=False,  # the attempt is the new one; the state decides
    ),
    _renew(RecordState.RUNNING),
    _renew(RecordState.FINISHED),
    Move(
        "finish",
        (RecordState.RUNNING,),
        lambda s, r, a, now: s.finish(
            r.rollout_id,
            attempt=a,
            response=RESPONSE,
            lease_until=now + 60,
            expires_at=KEEP,
            now=now,
        ),
        _finished,
    ),
    Move(
        "deliver",
        (RecordState.FINISHED,),
        lambda s, r, a, now: s.deliver(
            r.rollout_id, attempt=a, delivery_attempts=4, expires_at=KEEP, now=now
        ),
        lambda before, now: _delivery_over(
            before, now, state=RecordState.DELIVERED, delivered_at=now, last_error=None
        ),
    ),
    Move(
        "mark_undeliverable",
        (RecordState.FINISHED,),
        lambda s, r, a, now: s.mark_undeliverable(
            r.rollout_id, attempt=a, error=ERROR, delivery_attempts=4, expires_at=KEEP, now=now
        ),
        lambda before, now: _delivery_over(
            before, now, state=RecordState.UNDELIVERABLE, last_error=ERROR
        ),
    ),
    Move(
        "park",
        (RecordState.FINISHED,),
        lambda s, r, a, now: s.park(
            r.rollout_id,
            attempt=a,
            error=ERROR,
            next_attempt_at=now + 30.125,
            delivery_attempts=4,
            expires_at=KEEP,
            now=now,
            sealed_key="cmVzZWFsZWQ=",
        ),
        lambda before, now: before.evolve(
            next_attempt_at=now + 30.125,
            due_at=now + 30.125,
            last_error=ERROR,
            delivery_attempts=4,
            lease_until=None,
            updated_at=now,
            expires_at=KEEP,
            sealed_key="cmVzZWFsZWQ=",
        ),
    ),
    Move(
        "settle",
        (RecordState.ACCEPTED, RecordState.RUNNING),
        lambda s, r, a, now: s.settle(
            r.rollout_id,
            attempt=a,
            response=RESPONSE,
            lease_until=now + 60,
            expires_at=KEEP,
            now=now,
        ),
        lambda before, now: _finished(before, now, attempt=before.attempt + 1),
        waits_for_lease=True,
    ),
    Move(
        "reclaim_delivery",
        (RecordState.FINISHED,),
        lambda s, r, a, now: s.reclaim_delivery(
            r.rollout_id, attempt=a, lease_until=now + 60, now=now
        ),
        lambda before, now: before.evolve(
            attempt=before.attempt + 1, lease_until=now + 60, updated_at=now
        ),
        waits_for_lease=True,
    ),
    Move(
        "request_cancel",
        (RecordState.ACCEPTED, RecordState.RUNNING),
        lambda s, r, a, now: s.request_cancel(r.rollout_id, now=now),
        lambda before, now: before.evolve(cancel_requested=True, updated_at=now),
        checks_attempt=False,
    ),
    Move(
        "request_cancel-with-a-reason",
        (RecordState.ACCEPTED, RecordState.RUNNING),
        lambda s, r, a, now: s.request_cancel(r.rollout_id, now=now, reason="lease_expired"),
        lambda before, now: before.evolve(
            cancel_requested=True, updated_at=now, cancel_reason="lease_expired"
        ),
        checks_attempt=False,
    ),
    Move(
        "mark_handoff",
        (RecordState.ACCEPTED,),
        lambda s, r, a, now: s.mark_handoff(
            r.rollout_id, count=r.handoffs + 1, lease_until=now + 60, now=now, watch=True
        ),
        lambda before, now: before.evolve(
            handoffs=before.handoffs + 1, lease_until=now + 60, due_at=now + 60, updated_at=now
        ),
        checks_attempt=False,
    ),
    Move(
        "handed_off",
        (RecordState.ACCEPTED,),
        lambda s, r, a, now: s.handed_off(r.rollout_id, expires_at=KEEP, now=now),
        lambda before, now: before.evolve(due_at=None),
        checks_attempt=False,
    ),
]


def _each(moves: list[Move]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("move", moves, ids=[m.name for m in moves])


every_move = _each(MOVES)
#: The moves that refuse a stale attempt (the others take the record whatever its attempt).
attempt_checking_moves = _each([m for m in MOVES if m.checks_attempt])
#: The moves that leave a state a worker's lease is held in. The others move only ACCEPTED
#: records, which hold a lease only as a duplicate's hand-off lease:
#: test_a_duplicates_hand_off_lease_bounds_hand_offs_and_is_due_when_it_ends checks that one.
leased_state_moves = _each([m for m in MOVES if set(m.from_states) - {RecordState.ACCEPTED}])


def _rid(state: RecordState) -> str:
    return "r-" + state.value.lower()


async def _unchanged(store: Store, result: TransitionResult, before: RolloutRecord) -> None:
    assert result.applied is False
    assert result.record == before
    assert await store.get(before.rollout_id, now=LATER) == before


@every_move
async def test_a_move_applies_from_each_of_its_states(store: Store, move: Move) -> None:
    for state in move.from_states:
        before = await reach(store, state, _rid(state))
        result = await move.call(store, before, before.attempt, LATER)
        assert result.applied is True
        assert result.record == move.expect(before, LATER)
        assert await store.get(before.rollout_id, now=LATER) == result.record


@every_move
async def test_a_move_from_any_other_state_changes_nothing(store: Store, move: Move) -> None:
    others = [s for s in RecordState if s not in move.from_states]
    assert others
    for state in others:
        before = await reach(store, state, _rid(state))
        await _unchanged(store, await move.call(store, before, before.attempt, LATER), before)


@attempt_checking_moves
async def test_a_move_on_another_attempt_changes_nothing(store: Store, move: Move) -> None:
    before = await reach(store, move.from_states[-1])
    for stale in (before.attempt - 1, before.attempt + 1):
        await _unchanged(store, await move.call(store, before, stale, LATER), before)


@every_move
async def test_a_move_of_an_absent_record_changes_nothing(store: Store, move: Move) -> None:
    ghost = await reach(store, move.from_states[0], "kept")
    ghost = dataclasses.replace(ghost, rollout_id="ghost")
    result = await move.call(store, ghost, ghost.attempt, LATER)
    assert (result.applied, result.record) == (False, None)
    assert await store.get("ghost", now=LATER) is None


@every_move
async def test_a_move_of_an_expired_record_changes_nothing(store: Store, move: Move) -> None:
    before = await reach(store, move.from_states[0])
    expired_at = float(before.expires_at)
    result = await move.call(store, before, before.attempt, expired_at)
    assert (result.applied, result.record) == (False, None)
    assert await store.get(before.rollout_id, now=expired_at) is None
    assert await store.get(before.rollout_id, now=expired_at - 1) == before


@leased_state_moves
async def test_a_held_lease_stops_only_the_moves_that_wait_for_it(store: Store, move: Move) -> None:
    leased = [s for s in move.from_states if s != RecordState.ACCEPTED]
    before = await reach(store, leased[0])
    assert before.lease_until is not None
    at = before.lease_until  # a lease is held up to and including lease_until
    result = await move.call(store, before, before.attempt, at)
    if move.waits_for_lease:
        await _unchanged(store, result, before)
        at += 0.001
        result = await move.call(store, before, before.attempt, at)
    assert result.applied is True
    assert result.record == move.expect(before, at)


async def test_settle_and_reclaim_can_take_a_held_lease(store: Store) -> None:
    running = await reach(store, RecordState.RUNNING, "running")
    finished = await reach(store, RecordState.FINISHED, "finished")
    now = NOW + 10  # both leases are held
    settled = await store.settle(
        "running",
        attempt=1,
        response=RESPONSE,
        lease_until=now + 60,
        expires_at=KEEP,
        now=now,
        even_if_leased=True,
    )
    assert settled.record == _finished(running, now, attempt=2)
    reclaimed = await store.reclaim_delivery(
        "finished", attempt=1, lease_until=now + 60, now=now, even_if_leased=True
    )
    assert reclaimed.record == finished.evolve(attempt=2, lease_until=now + 60, updated_at=now)


async def test_park_without_a_new_key_keeps_the_sealed_one(store: Store) -> None:
    await reach(store, RecordState.FINISHED)
    parked = await store.park(
        "r-1",
        attempt=1,
        error=None,
        next_attempt_at=LATER + 30,
        delivery_attempts=1,
        expires_at=KEEP,
        now=LATER,
    )
    assert parked.record is not None
    assert (parked.record.sealed_key, parked.record.last_error) == (SEALED, None)


async def test_a_final_state_is_reached_once(store: Store) -> None:
    await reach(store, RecordState.FINISHED)
    deliveries = [
        await store.deliver("r-1", attempt=1, delivery_attempts=1, expires_at=KEEP, now=now)
        for now in (LATER, LATER + 1)
    ]
    assert [d.applied for d in deliveries] == [True, False]
    assert deliveries[1].record == deliveries[0].record


async def test_a_misspelt_field_is_a_type_error_before_any_store_is_touched(
    store: Store,
) -> None:
    before = await reach(store, RecordState.RUNNING)
    misspelt: dict[str, Any] = {"lease_untl": LATER + 60}
    with pytest.raises(TypeError, match="lease_untl"):
        await store._apply(
            "r-1", Guard(states=(RecordState.RUNNING,)), Update(**misspelt), now=LATER
        )
    assert await store.get("r-1", now=LATER) == before


def test_an_update_names_only_fields_of_the_record() -> None:
    record_fields = {f.name for f in dataclasses.fields(RolloutRecord)}
    update_fields = {f.name for f in dataclasses.fields(Update)}
    assert update_fields <= record_fields
    # What identifies the rollout and what it was asked never changes.
    assert not update_fields & {"rollout_id", "slot", "fingerprint", "request", "init_response"}
