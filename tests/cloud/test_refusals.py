"""What init refuses on the target, and that a refused init starts nothing: 401, 409, 413, 422."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rollout_sdk.protocol import DEFAULT_MAX_METADATA_SIZE_BYTES

from .checks import assert_nothing_started
from .target import Target

pytestmark = pytest.mark.integration

#: The kit's default body limit (ROLLOUT_SDK_MAX_BODY_BYTES), which is Lambda's payload limit.
MAX_BODY_BYTES = 6 * 1024 * 1024


@pytest.mark.parametrize("authorization", [None, "Bearer not-the-server-key", "Basic bm90OmEta2V5"])
def test_no_or_a_wrong_server_key_is_401_and_starts_nothing(
    target: Target, authorization: str | None
) -> None:
    rollout_id = target.new_id("unauthorised")
    headers = {} if authorization is None else {"Authorization": authorization}
    answer = httpx.post(
        f"{target.base_url}/v1/rollout/init",
        json=target.body(rollout_id),
        headers=headers,
        timeout=60,
    )
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == "Bearer"
    assert_nothing_started(target, rollout_id)


def test_a_reused_idempotency_key_with_another_request_is_409_naming_the_field(
    target: Target,
) -> None:
    rollout_id = target.new_id("conflict")
    key = f"key-{rollout_id}"
    first = target.body(rollout_id, idempotency_key=key)
    assert target.init(first).status_code == 202
    seen = target.wait_reported(rollout_id)
    answer = target.init({**first, "max_turns": 11})
    assert answer.status_code == 409, answer.text
    assert answer.json()["fields"] == ["max_turns"]
    assert "max_turns" in answer.json()["detail"]
    # One rollout under a second key is a conflict too: a rollout id runs once.
    answer = target.init({**first, "idempotency_key": f"{key}-other"})
    assert answer.status_code == 409, answer.text
    assert answer.json()["fields"] == ["rollout_id"]
    assert target.callback_key not in answer.text
    assert target.observed(rollout_id) == seen


def test_metadata_over_its_limit_is_413_naming_the_limit(target: Target) -> None:
    rollout_id = target.new_id("metadata")
    body = target.body(rollout_id, metadata={"padding": "x" * DEFAULT_MAX_METADATA_SIZE_BYTES})
    answer = target.init(body)
    assert answer.status_code == 413, answer.text[:300]
    detail = answer.json()["detail"]
    assert str(DEFAULT_MAX_METADATA_SIZE_BYTES) in detail
    assert "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES" in detail
    assert_nothing_started(target, rollout_id)


def test_a_body_over_the_size_limit_is_refused_and_starts_nothing(target: Target) -> None:
    rollout_id = target.new_id("body")
    body = target.body(rollout_id)
    body["messages"][-1]["content"] += " " + "x" * MAX_BODY_BYTES
    answer = target.init(body)
    if target.rig is not None:
        # The kit's own answer, before the body is parsed.
        assert answer.status_code == 413, answer.text[:300]
        assert "ROLLOUT_SDK_MAX_BODY_BYTES" in answer.json()["detail"]
    else:
        # On a stack a body this size never reaches the kit: Lambda's 6 MB payload limit binds
        # first, and API Gateway or Lambda answers (413 is expected; any refusal passes).
        assert 400 <= answer.status_code < 600, answer.text[:300]
    assert_nothing_started(target, rollout_id)


def _without(field: str) -> Any:
    def change(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k != field}

    return change


def _with(**fields: Any) -> Any:
    def change(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, **fields}

    return change


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_without("messages"), "messages"),
        (_with(server_url="ftp://traingate.example"), "server_url"),
        # The kit's own rule: never call the cloud's metadata service back.
        (_with(server_url="http://169.254.169.254/latest"), "server_url"),
        (_with(max_turns="many"), "max_turns"),
        (_with(metadata=["not", "an", "object"]), "metadata"),
    ],
    ids=["no-messages", "ftp-server-url", "link-local-server-url", "max-turns", "metadata"],
)
def test_an_invalid_body_is_422_naming_the_field(target: Target, change: Any, field: str) -> None:
    rollout_id = target.new_id("invalid")
    answer = target.init(change(target.body(rollout_id)))
    assert answer.status_code == 422, answer.text
    assert ["body", field] in [error["loc"] for error in answer.json()["detail"]], answer.text
    assert target.callback_key not in answer.text  # the input is never echoed
    assert_nothing_started(target, rollout_id)
