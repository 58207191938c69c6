"""TrainGate failing on command under load, through ``rollout-sdk serve``: every fault profile
at once, each rollout reported once, with the outcome its fault calls for."""

from __future__ import annotations

import pytest

from testkit.rigs import LocalRig
from testkit.scenarios.base import FAST, Row
from testkit.scenarios.faults import PROFILES, Profile, run_fault_mix

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mix(fault_rig: LocalRig) -> dict[str, Row]:
    rows = run_fault_mix(fault_rig, FAST)
    return {profile.key: row for profile, row in zip(PROFILES, rows, strict=True)}


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.key)
def test_every_rollout_is_reported_once_with_the_outcome_its_fault_calls_for(
    mix: dict[str, Row], profile: Profile
) -> None:
    row = mix[profile.key]
    assert row.ok, row.summary()
    n = FAST.per_profile
    assert (row.sent, row.reported, row.lost, row.duplicated) == (n, n, 0, 0), row.summary()
    assert row.resent == profile.resent * n, row.summary()
    # Counted from what the stand-in received: one category for the whole row.
    assert row.categories == {profile.category or "none": n}, row.summary()


def _outcomes(rig: LocalRig, row: Row, endpoint: str) -> set[tuple[str, int | None]]:
    return {
        (call.outcome, call.status)
        for rid in row.ids
        for call in rig.standin.calls_for(endpoint, rid)
    }


def test_the_stand_in_really_answered_with_each_fault(
    fault_rig: LocalRig, mix: dict[str, Row]
) -> None:
    # No profile may pass for want of its fault: each one's calls show it.
    assert ("failed", 502) in _outcomes(fault_rig, mix["chat-5xx"], "chat")
    assert ("failed", 429) in _outcomes(fault_rig, mix["chat-429"], "chat")
    assert ("failed", None) in _outcomes(fault_rig, mix["chat-drop"], "chat")
    assert ("failed", None) in _outcomes(fault_rig, mix["chat-timeout"], "chat")
    assert _outcomes(fault_rig, mix["chat-4xx"], "chat") == {("refused", 400)}
    assert ("failed", 500) in _outcomes(fault_rig, mix["cb-5xx"], "completed")
    assert ("failed", None) in _outcomes(fault_rig, mix["cb-drop"], "completed")
    assert ("ack_lost", None) in _outcomes(fault_rig, mix["cb-lost-ack"], "completed")
    refused = _outcomes(fault_rig, mix["cb-4xx"], "completed")
    assert refused == {("refused", 400), ("refused", 403)}
    assert _outcomes(fault_rig, mix["clean"], "completed") == {("ok", 200)}
