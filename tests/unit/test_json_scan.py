"""The skeleton of JSON text: its values and depth, counted without parsing, checked against what
the json module parses from the same text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout_sdk.json_scan import Skeleton
from rollout_sdk.protocol import MAX_JSON_NESTING, json_problem


def parsed_values(value: Any) -> int:
    """Values in ``value``, containers included, and each key as one more."""
    if isinstance(value, dict):
        return 1 + sum(1 + parsed_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(parsed_values(v) for v in value)
    return 1


def parsed_depth(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value
    if not isinstance(value, dict | list):
        return 0
    return 1 + max((parsed_depth(c) for c in children), default=0)


TEXTS = [
    "0",
    '"a"',
    "[]",
    "{}",
    "[1, 2, 3]",
    '{"a": 1}',
    '{"a": [{}, {}], "b": {"c": null, "d": [true, false]}}',
    "[[[]]]",
    "[[], [[]], [[[]]], 0]",
    " \t\n[ 1 ,\r\n [ ] , { } ] ",
    # Structural characters, quotes and backslashes inside strings count for nothing:
    '["[", "]", "{", "}", ",", ":", "[]", "{}", "[[[[", "}}}}"]',
    '{"a,b": "c:d", "[": "{", "}]": ",,,,"}',
    r'["\"", "\\", "\\\"", "\\\\", "a\"b,c\"d", "\\\\\"]\\\\"]',
    r'{"k\"e,y": ["x\\", "\"[{"]}',
    r'["\u005c", "\u0022[", "\ud83d\ude00", "\n\t\/"]',
    '["", "", ""]',
    '{"": "", " ": ""}',
    "[-1.5e+10, 0, 1E-3, null, true]",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_skeleton_counts_what_the_parser_builds(text: str) -> None:
    skeleton = Skeleton(text.encode())
    value = json.loads(text)
    assert skeleton.values() == parsed_values(value)
    assert skeleton.depth() == parsed_depth(value)


@pytest.mark.parametrize(
    ("text", "values", "depth"),
    [
        ("", 0, 0),
        ("7", 1, 0),
        ("[]", 1, 1),
        ('{"a": [1, 2]}', 5, 2),  # the object, its key, the array, its two numbers
        ('["[[[", "]]]"]', 3, 1),
        (r'["a\"[", "\\", "]"]', 4, 1),
    ],
)
def test_values_and_depth_by_hand(text: str, values: int, depth: int) -> None:
    skeleton = Skeleton(text.encode())
    assert (skeleton.values(), skeleton.depth()) == (values, depth)


@pytest.mark.parametrize("levels", [1, 63, 64, 65, 500])
def test_depth_is_exact_at_any_level(levels: int) -> None:
    nested = "[" * levels + "]" * levels
    text = f'{{"a": {nested}, "b": [1], "c": "{"[" * (levels + 5)}"}}'
    assert Skeleton(text.encode()).depth() == levels + 1


def test_a_wide_text_is_counted_exactly() -> None:
    # Many items, strings that cross the slices the text is stripped in, and escapes at the
    # slice edges: the figures are those of the parsed value.
    items: list[Any] = []
    for i in range(30_000):
        items.append({"s": "x" * (i % 97) + '\\",[{' * (i % 3), "n": [i, [], {}]})
    items.append("," * 200_000)
    text = json.dumps(items).encode()
    assert len(text) > 10 * 64 * 1024
    skeleton = Skeleton(text)
    assert skeleton.values() == parsed_values(items)
    assert skeleton.depth() == parsed_depth(items) == 4


@pytest.mark.parametrize(
    "text",
    [b'{"a": "unterminated, [{', b"[[[", b"]]]", b"}{", b'"\\', b"\xff\xfe[,", b'{"a":}'],
)
def test_text_that_is_not_json_is_measured_without_failing(text: bytes) -> None:
    skeleton = Skeleton(text)
    assert skeleton.values() >= 0
    assert skeleton.depth() >= 0


def test_an_unterminated_string_counts_nothing_after_it() -> None:
    assert Skeleton(b'[1, "open, [[[, {{{').values() == 3


def test_a_field_nesting_at_the_limit_passes_and_one_level_more_is_named() -> None:
    at_limit: Any = 0
    for _ in range(MAX_JSON_NESTING):
        at_limit = [at_limit]
    assert json_problem("metadata", {"x": at_limit[0]}) is None
    assert json_problem("metadata", {"x": at_limit}) == (
        f"metadata nests arrays and objects deeper than {MAX_JSON_NESTING} levels"
    )
    # Brackets in strings are not nesting, nor are many side by side (both more brackets than
    # levels: measured on the skeleton).
    assert json_problem("metadata", {"x": "[" * 1000}) is None
    assert json_problem("metadata", {"x": [[{}]] * 1000}) is None


def test_a_large_value_that_fails_is_named_without_walking_it_all() -> None:
    # The fault is the last item: the walk that would find it stops long before, and the
    # field is named all the same.
    value: list[Any] = [{}] * 200_000 + [float("nan")]
    assert json_problem("completion_params", value) == (
        "completion_params holds NaN or Infinity, which is not a JSON number"
    )
    surrogate: list[Any] = [[]] * 200_000 + ["\ud800"]
    assert "completion_params holds an unpaired surrogate" in str(
        json_problem("completion_params", surrogate)
    )
    # A small one is walked and the item named.
    assert json_problem("metadata", {"a": [1, float("inf")]}) == (
        "metadata.a[1] is inf, which is not a JSON number"
    )
