"""Cancel on the target: a running rollout stops and is reported once, as ERROR "cancelled"."""

from __future__ import annotations

import pytest

from .agents import slow
from .checks import require_suite_agent
from .target import Target

pytestmark = pytest.mark.integration

TURNS = 30


def test_cancel_stops_a_running_rollout_and_reports_it_once_as_error_cancelled(
    target: Target,
) -> None:
    require_suite_agent(target)
    rollout_id = target.new_id("cancel")
    # 30 turns a second apart: well past the cancel, which on Lambda reaches the worker with
    # its next heartbeat (every ROLLOUT_SDK_HEARTBEAT_SECONDS, 15 s).
    assert target.init(target.body(rollout_id, metadata=slow(TURNS, 1.0))).status_code == 202
    target.wait_chat(rollout_id)
    answer = target.http.post(f"/v1/rollout/{rollout_id}/cancel")
    assert answer.status_code == 202, answer.text
    assert answer.json()["cancel_requested"] is True
    seen = target.wait_reported(rollout_id)
    assert len(seen["completions"]) == 1, seen
    done = seen["completions"][0]
    assert (done["status"], done["finish_reason"]) == ("ERROR", "cancelled"), done
    assert seen["chat_calls"] < TURNS
    status = target.status(rollout_id).json()
    assert (status["state"], status["status"]) == ("DELIVERED", "ERROR")
    # Nothing left to cancel: 409; an unknown rollout: 404.
    assert target.http.post(f"/v1/rollout/{rollout_id}/cancel").status_code == 409
    assert target.http.post(f"/v1/rollout/{target.new_id('x')}/cancel").status_code == 404
    assert target.observed(rollout_id) == seen
