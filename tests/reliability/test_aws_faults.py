"""The AWS path: ``handler.py`` on moto's server, crashes in real worker processes."""

from __future__ import annotations

import pytest

from testkit.rigs import AwsRig
from testkit.scenarios.aws import (
    run_aws_aged_out,
    run_aws_deadline,
    run_aws_duplicate_deliveries,
    run_aws_identical_inits,
    run_aws_parked_redrive,
    run_aws_worker_deaths,
)
from testkit.scenarios.base import FAST, Row

from .rows import assert_reported_once

pytestmark = pytest.mark.integration


def test_a_worker_event_delivered_twice_at_once_and_again_later_runs_once(
    aws_rig: AwsRig,
) -> None:
    row = run_aws_duplicate_deliveries(aws_rig, FAST)
    assert_reported_once(row, FAST.aws_deliveries)
    assert "1 done, 1 skipped, 1 late skipped" in row.measured


def test_identical_inits_across_environments_run_once(aws_rig: AwsRig) -> None:
    assert_reported_once(run_aws_identical_inits(aws_rig, FAST), FAST.aws_init_rollouts)


@pytest.fixture(scope="module")
def deaths(aws_rig: AwsRig) -> list[Row]:
    return run_aws_worker_deaths(aws_rig, FAST)


@pytest.mark.parametrize(
    "index",
    [0, 1, 2, 3],
    ids=[
        "mid-run-failure-destination",
        "mid-run-redelivered",
        "finished-failure-destination",
        "finished-redelivered",
    ],
)
def test_a_killed_worker_is_reported_once_and_not_run_again(deaths: list[Row], index: int) -> None:
    # Mid-run (the record RUNNING): a worker lost; after storing its response: no failure.
    assert_reported_once(deaths[index], FAST.aws_deaths, "worker_lost" if index < 2 else "none")


def test_an_event_that_aged_out_is_reported_once_as_never_started(aws_rig: AwsRig) -> None:
    row = run_aws_aged_out(aws_rig, FAST)
    assert_reported_once(row, FAST.aws_deaths, "never_started")
    assert "late events 1 skipped" in row.measured


def test_a_parked_response_is_redriven_once_even_by_two_redrives_at_once(
    aws_rig: AwsRig,
) -> None:
    assert_reported_once(run_aws_parked_redrive(aws_rig, FAST), FAST.aws_parked)


def test_a_slow_agent_is_stopped_before_the_lambda_time_runs_out(aws_rig: AwsRig) -> None:
    row = run_aws_deadline(aws_rig, FAST)
    assert_reported_once(row, FAST.aws_deadlines, "timeout")
    assert "timeout" in row.measured
