"""Cancel, backpressure and the rollout deadline, through ``rollout-sdk serve`` with 2 running
and 2 queued at most and a 4 s request timeout."""

from __future__ import annotations

import pytest

from testkit.rigs import LocalRig
from testkit.scenarios.base import FAST, Row
from testkit.scenarios.control import run_backpressure, run_cancel, run_local_deadline

from .rows import assert_reported_once

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cancelled(control_rig: LocalRig) -> list[Row]:
    return run_cancel(control_rig, FAST)


def test_a_running_rollout_stops_before_its_next_turn_and_is_reported_once(
    cancelled: list[Row],
) -> None:
    assert_reported_once(cancelled[0], FAST.control_running * FAST.cancel_rounds, "cancelled")


def test_a_queued_rollout_is_reported_cancelled_without_running(cancelled: list[Row]) -> None:
    row = cancelled[1]
    assert_reported_once(row, FAST.control_queued * FAST.cancel_rounds, "cancelled")
    assert row.counts["chat calls"] == 0
    assert row.counts["unknown id 404"] == 1


def test_cancelling_a_reported_rollout_is_409(cancelled: list[Row]) -> None:
    row = cancelled[2]
    assert row.ok, row.summary()
    total = (FAST.control_running + FAST.control_queued) * FAST.cancel_rounds
    assert (row.counts["409"], row.counts["callbacks after the 409"]) == (total, 0)


def test_excess_inits_get_429_with_retry_after_and_every_rollout_is_reported_once(
    control_rig: LocalRig, cancelled: list[Row]
) -> None:
    del cancelled  # after the cancel tests: both use the rig's only slots
    row = run_backpressure(control_rig, FAST)
    assert_reported_once(row, FAST.backpressure)
    assert "x 429" in row.measured and not row.measured.startswith("0 x")


def test_a_rollout_past_the_request_timeout_is_stopped_and_reported_once_as_timeout(
    control_rig: LocalRig, cancelled: list[Row]
) -> None:
    del cancelled  # after the cancel tests, which need the rig's slots free
    row = run_local_deadline(control_rig, FAST)
    assert_reported_once(row, FAST.control_running, "timeout")
    assert row.measured.startswith(f"{FAST.control_running} timeout")
