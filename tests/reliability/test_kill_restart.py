"""SIGKILL ``rollout-sdk serve`` with rollouts in every state; start it again with the same
command in the same folder: every rollout in flight reported once, none run again. On each store
that outlives the process: SQLite, and DynamoDB through ``--dynamodb-endpoint`` (its records
name the server that owns them; the owner id lives in the state folder)."""

from __future__ import annotations

import pytest

from testkit.scenarios.base import FAST, Row
from testkit.scenarios.kill import run_kill_restart

pytestmark = pytest.mark.integration

GROUPS = ["delivered", "parked", "running", "finished", "queued"]


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def rows(request: pytest.FixtureRequest) -> dict[str, Row]:
    return dict(zip(GROUPS, run_kill_restart(FAST, store=request.param), strict=True))


STATE_AT_KILL = {
    "delivered": "DELIVERED",
    "parked": "FINISHED",
    "running": "RUNNING",
    "finished": "FINISHED",
    "queued": "ACCEPTED",
}


@pytest.mark.parametrize("group", GROUPS)
def test_reported_once_and_never_run_again(rows: dict[str, Row], group: str) -> None:
    row = rows[group]
    assert row.ok, row.summary()
    assert row.sent == row.reported == 2
    assert row.counts[f"at the kill {STATE_AT_KILL[group]}"] == 2
    assert row.counts["received once"] == 2
    assert row.counts["chat calls after the kill"] == 0
    assert row.counts["runs after the kill"] == 0
    # Delivered before the kill: nothing after the restart; every other group: one POST each.
    assert row.counts["POSTs after the restart"] == (0 if group == "delivered" else 2)


def test_in_flight_rollouts_without_a_response_are_errors_and_stored_ones_are_sent(
    rows: dict[str, Row],
) -> None:
    assert rows["running"].counts["reported ERROR"] == 2
    assert rows["queued"].counts["reported ERROR"] == 2
    assert rows["finished"].counts["reported COMPLETED"] == 2
    assert rows["parked"].counts["reported COMPLETED"] == 2
    # A RUNNING record swept at the restart lost its worker; an ACCEPTED one never started.
    assert rows["running"].categories == {"worker_lost": 2}
    assert rows["queued"].categories == {"never_started": 2}
    for group in ("delivered", "parked", "finished"):
        assert rows[group].categories == {"none": 2}
