"""Duplicates and bad input at init, through ``rollout-sdk serve``."""

from __future__ import annotations

import pytest

from testkit.rigs import LocalRig
from testkit.scenarios.bad_input import run_bad_input
from testkit.scenarios.base import FAST, Row
from testkit.scenarios.duplicates import run_duplicates

from .rows import assert_reported_once

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def duplicates(fault_rig: LocalRig) -> list[Row]:
    return run_duplicates(fault_rig, FAST)


def test_fifty_identical_inits_give_one_run_one_callback_and_identical_bodies(
    duplicates: list[Row],
) -> None:
    row = duplicates[0]
    assert_reported_once(row, FAST.duplicate_rollouts)
    assert row.duplicated == 0
    assert f"{FAST.duplicate_rollouts}/{FAST.duplicate_rollouts} rollouts with identical" in (
        row.measured
    )


def test_a_reused_key_with_a_different_request_is_409_naming_the_fields(
    duplicates: list[Row],
) -> None:
    row = duplicates[1]
    assert_reported_once(row, FAST.conflicts)
    assert row.measured.startswith(f"{2 * FAST.conflicts}/{2 * FAST.conflicts} conflicting")


def test_a_reused_rollout_id_under_another_key_is_409_live_and_after(
    duplicates: list[Row],
) -> None:
    row = duplicates[2]
    assert_reported_once(row, FAST.conflicts)
    assert row.measured.startswith(f"{2 * FAST.conflicts}/{2 * FAST.conflicts} answered 409")


def test_bad_input_is_refused_with_the_right_4xx_and_nothing_is_stored_or_run(
    fault_rig: LocalRig,
) -> None:
    row = run_bad_input(fault_rig)
    assert row.ok, row.summary()
    assert row.sent == 17
    assert row.reported == 0
    assert not row.categories  # no final response: the column shows "-"
