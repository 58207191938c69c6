"""SIGKILL ``rollout-sdk serve`` with rollouts in every state; start it again with the same
command in the same folder: every rollout in flight reported once, none run again."""

from __future__ import annotations

import pytest

from testkit.scenarios.base import FAST, Row
from testkit.scenarios.kill import run_kill_restart

pytestmark = pytest.mark.integration

GROUPS = ["delivered", "parked", "running", "finished", "queued"]


@pytest.fixture(scope="module")
def rows() -> dict[str, Row]:
    return dict(zip(GROUPS, run_kill_restart(FAST), strict=True))


@pytest.mark.parametrize("group", GROUPS)
def test_reported_once_and_never_run_again(rows: dict[str, Row], group: str) -> None:
    row = rows[group]
    assert row.ok, row.summary()
    assert row.sent == row.reported == 2
    assert "chat calls unchanged since the kill" in row.measured


def test_in_flight_rollouts_without_a_response_are_errors_and_stored_ones_are_sent(
    rows: dict[str, Row],
) -> None:
    assert "2 ERROR" in rows["running"].measured
    assert "2 ERROR" in rows["queued"].measured
    assert "2 COMPLETED" in rows["finished"].measured
    assert "2 COMPLETED" in rows["parked"].measured
