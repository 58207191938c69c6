"""A rollout end to end on the target: init, its callback, duplicates, its status."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from .target import Target

pytestmark = pytest.mark.integration

TOOLS = {"calculate", "square_root"}


def test_init_is_accepted_and_the_rollout_called_back_once_completed(target: Target) -> None:
    rollout_id = target.new_id("init")
    answer = target.init(target.body(rollout_id))
    assert answer.status_code == 202, answer.text
    assert answer.json()["rollout_id"] == rollout_id
    assert {tool["function"]["name"] for tool in answer.json()["tools"]} == TOOLS
    seen = target.wait_reported(rollout_id)
    assert len(seen["completions"]) == 1, seen
    done = seen["completions"][0]
    assert (done["status"], done["reward"]) == ("COMPLETED", 1.0), done
    assert seen["completed_calls"] == ["ok"]
    assert seen["runs"] == 1


def test_duplicate_inits_answer_identically_and_start_one_rollout(target: Target) -> None:
    rollout_id = target.new_id("duplicate")
    body = target.body(rollout_id, idempotency_key=f"key-{rollout_id}")
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: target.init(body), range(4)))
    assert [a.status_code for a in answers] == [202] * 4, [a.text for a in answers]
    assert len({a.text for a in answers}) == 1
    seen = target.wait_reported(rollout_id)
    # Once it is delivered, a late duplicate still gets the same body, and starts nothing.
    late = target.init(body)
    assert (late.status_code, late.text) == (202, answers[0].text)
    assert target.status(rollout_id).json()["state"] == "DELIVERED"
    after = target.observed(rollout_id)
    assert (len(seen["completions"]), seen["runs"]) == (1, 1), seen
    assert after == seen


def test_status_is_the_record_without_the_request_or_any_key(target: Target) -> None:
    rollout_id = target.new_id("status")
    assert target.init(target.body(rollout_id)).status_code == 202
    target.wait_reported(rollout_id)
    answer = target.status(rollout_id)
    assert answer.status_code == 200, answer.text
    status = answer.json()
    assert status["rollout_id"] == rollout_id
    assert (status["state"], status["status"], status["delivered"]) == (
        "DELIVERED",
        "COMPLETED",
        True,
    )
    assert (status["reward"], status["delivery_attempts"]) == (1.0, 1)
    assert "messages" not in status and "request" not in status
    assert target.callback_key not in answer.text
    assert target.server_key not in answer.text
    assert target.status(target.new_id("unknown")).status_code == 404
