"""An init body's counts, each at its limit and one past it (InitBodyLimits.check, alone)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout_sdk.errors import PayloadTooLarge
from rollout_sdk.http.body_limits import InitBodyLimits
from rollout_sdk.json_scan import Skeleton
from rollout_sdk.protocol import json_size
from rollout_sdk.settings import load_settings

from .support import request_body

ROOMY = InitBodyLimits(
    max_json_values=10**9,
    max_json_depth=10**6,
    max_messages=10**9,
    max_tools=10**9,
    max_metadata_bytes=10**9,
)


def limits(**tight: int) -> InitBodyLimits:
    return InitBodyLimits(**{**ROOMY.__dict__, **tight})


def body(**overrides: Any) -> bytes:
    return json.dumps(request_body(**overrides)).encode()


def test_the_limits_come_from_the_settings() -> None:
    settings = load_settings(
        kit={"max_json_values": 20_000, "max_json_depth": 9, "max_messages": 101, "max_tools": 11},
        max_metadata_size_bytes=4096,
    )
    assert InitBodyLimits.from_settings(settings) == InitBodyLimits(20_000, 9, 101, 11, 4096)


def test_values_at_the_limit_pass_and_one_more_is_refused() -> None:
    content = body(metadata={"ids": list(range(300)), "s": "[,{:" * 50})
    values = Skeleton(content).values()
    limits(max_json_values=values).check(content)
    with pytest.raises(PayloadTooLarge) as refused:
        limits(max_json_values=values - 1).check(content)
    assert str(refused.value) == (
        f"the body holds {values} JSON values (keys included); the limit is {values - 1} "
        "(raise it with ROLLOUT_SDK_MAX_JSON_VALUES)"
    )


def test_depth_at_the_limit_passes_and_one_more_is_refused() -> None:
    nested: Any = 0
    for _ in range(10):
        nested = [nested]
    content = body(metadata={"x": nested, "y": "[[[[[[[[[[[[[[[["})
    limits(max_json_depth=12).check(content)  # the body, metadata, and ten arrays
    with pytest.raises(
        PayloadTooLarge,
        match=r"nests arrays and objects 12 levels deep; "
        r"the limit is 11 \(raise it with ROLLOUT_SDK_MAX_JSON_DEPTH\)",
    ):
        limits(max_json_depth=11).check(content)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {}}}


@pytest.mark.parametrize(
    ("content", "limit", "count", "refusal"),
    [
        (
            body(messages=[{"role": "user", "content": "hi"}] * 40),
            "max_messages",
            40,
            "messages holds 40 messages; the limit is 39 (raise it with ROLLOUT_SDK_MAX_MESSAGES)",
        ),
        (
            body(completion_params={"temperature": 1.0, "tools": [TOOL] * 7}),
            "max_tools",
            7,
            "completion_params.tools holds 7 tools; the limit is 6 "
            "(raise it with ROLLOUT_SDK_MAX_TOOLS)",
        ),
    ],
    ids=["messages", "tools"],
)
def test_a_fields_entries_at_the_limit_pass_and_one_more_is_refused(
    content: bytes, limit: str, count: int, refusal: str
) -> None:
    limits(**{limit: count}).check(content)
    with pytest.raises(PayloadTooLarge) as refused:
        limits(**{limit: count - 1}).check(content)
    assert str(refused.value) == refusal


def test_metadata_at_the_limit_passes_and_one_byte_more_is_refused() -> None:
    metadata = {"token_ids": list(range(1000)), "note": "caf\u00e9"}
    size = json_size(metadata)
    content = body(metadata=metadata)
    limits(max_metadata_bytes=size).check(content)
    with pytest.raises(PayloadTooLarge, match="OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES"):
        limits(max_metadata_bytes=size - 1).check(content)


@pytest.mark.parametrize(
    "content",
    [
        b'{"rollout_id": "r1", ',
        b'{"messages": [' + b"{}," * 50,
        b"<xml/>",
        b"",
        b'"\\ud800"',
        b'[{"messages": []}]',
        b'{"messages": "x", "completion_params": [], "metadata": 1}',
        b'{"completion_params": {"tools": {"a": 1}}}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_what_is_not_an_init_object_within_the_counts_is_left_to_the_app(content: bytes) -> None:
    InitBodyLimits(10_000, 10_000, 10, 1, 1024).check(content)


def test_the_counts_apply_to_text_that_is_not_json_too() -> None:
    # Over a count is over a count: the body is refused, whatever else is wrong with it.
    with pytest.raises(PayloadTooLarge, match="ROLLOUT_SDK_MAX_JSON_VALUES"):
        limits(max_json_values=100).check(b'{"messages": [' + b"{}," * 200)
