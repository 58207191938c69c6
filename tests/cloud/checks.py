"""What several checks of the cloud suite assert alike."""

from __future__ import annotations

import pytest

from .agents import NAME
from .target import SUITE_AGENT, Target


def assert_nothing_started(target: Target, rollout_id: str) -> None:
    """No record of ``rollout_id`` on the server, and nothing of it reached TrainGate."""
    assert target.status(rollout_id).status_code == 404
    seen = target.observed(rollout_id)
    assert (seen["completions"], seen["chat_calls"], seen["runs"]) == ([], 0, 0)


def require_suite_agent(target: Target) -> None:
    """Skip, saying why and where the check runs, when the target serves another agent."""
    if target.agent != NAME:
        pytest.skip(
            f"{target.description} serves agent {target.agent!r}, not the suite's {NAME!r}: "
            f"this check needs a test stack deployed with AgentLoop={SUITE_AGENT} "
            "(docs/aws.md, 'A test stack for every check'); it runs against the local server in "
            "every make test"
        )
