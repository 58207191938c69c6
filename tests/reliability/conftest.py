"""The reliability slice: the scenarios of :mod:`testkit.scenarios` at the fast scale.

Each rig is started once for the package and stopped at its end: a ``rollout-sdk serve``
subprocess for the TrainGate faults, duplicates and bad input; another with small limits for
cancel and backpressure; the Lambda handlers on the session's moto server for the AWS path.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.rigs import AwsRig, LocalRig, control_env, fault_env
from testkit.scenarios.base import FAST

# The rows' shared assertions (tests/reliability/rows.py) report their values as the tests' do.
pytest.register_assert_rewrite("tests.reliability.rows")


@pytest.fixture(scope="package")
def fault_rig() -> Iterator[LocalRig]:
    """``rollout-sdk serve`` with a small client timeout and a re-drive every second."""
    with LocalRig(env=fault_env(FAST), name="faults") as rig:
        yield rig


@pytest.fixture(scope="package")
def control_rig() -> Iterator[LocalRig]:
    """``rollout-sdk serve`` holding 2 running and 2 queued rollouts, then answering 429."""
    with LocalRig(env=control_env(FAST), name="control", keep_chat=True) as rig:
        yield rig


@pytest.fixture(scope="package")
def aws_rig(moto_endpoint: str) -> Iterator[AwsRig]:
    """``handler.py`` imported in three execution environments against moto's server."""
    with AwsRig(
        endpoint=moto_endpoint, prefix="reliability", environments=FAST.aws_environments
    ) as rig:
        yield rig
