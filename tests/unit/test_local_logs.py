"""The local server's log lines (rollout_sdk/local/logs.py): time, level, logger, message, and
the rollout and category the record names; a failure the kit raised inside the agent's call is
one line, an agent's own error keeps its traceback for its author."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from rollout_sdk.engine.responses import agent_failure
from rollout_sdk.errors import OsmosisTransportError
from rollout_sdk.local.logs import LocalFormatter
from rollout_sdk.telemetry import RolloutLogFilter

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(LocalFormatter())
    handler.addFilter(RolloutLogFilter())
    kit = logging.getLogger("rollout_sdk")
    kit.addHandler(handler)
    level, kit.level = kit.level, logging.INFO
    try:
        yield out
    finally:
        kit.removeHandler(handler)
        kit.setLevel(level)


def test_an_unreachable_traingate_is_one_line_with_its_rollout_and_category(
    lines: io.StringIO,
) -> None:
    agent_failure("r-7", OsmosisTransportError("cannot reach 127.0.0.1:9"), [], attempt=1)
    (line,) = lines.getvalue().strip().splitlines()
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ERROR rollout_sdk\.engine\.responses: ", line)
    assert "rollout failed" in line and "rollout_id=r-7" in line
    assert "category=infrastructure" in line and "cannot reach 127.0.0.1:9" in line
    assert "agent loop raised" not in line


def test_an_agents_own_error_keeps_its_traceback(lines: io.StringIO) -> None:
    try:
        raise ValueError("bad tool arguments")
    except ValueError as exc:
        agent_failure("r-8", exc, [], attempt=1)
    text = lines.getvalue()
    first = text.splitlines()[0]
    assert "agent loop raised" in first and "rollout_id=r-8" in first
    assert "Traceback (most recent call last)" in text and "bad tool arguments" in text
