"""The matrix's own counting: what makes a rollout lost, duplicated or re-sent, and when the
runner fails. No server: calls are built by hand."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.testing.standin import ACK_LOST, FAILED, OK, REFUSED, Call
from testkit.report import render, run_report, totals
from testkit.scenarios.base import FAST, Delivery, Row, categories_cell
from testkit.scenarios.control import check_last_turn

_clock = itertools.count(1)


def call(
    outcome: str, status: int | None = 200, *, body: str = "COMPLETED", overlap: bool = False
) -> Call:
    """A completed-endpoint call, later than every call made before it (or overlapping the
    next one when ``overlap``)."""
    arrived = float(next(_clock))
    answered = arrived + (5.0 if overlap else 0.5)
    return Call(
        endpoint="completed",
        rollout_id="r",
        outcome=outcome,
        status=status,
        arrived=arrived,
        answered=answered,
        body={"rollout_id": "r", "status": body},
    )


def deliver(*calls: Call, runs: int = 1) -> Delivery:
    return Delivery("r", tuple(calls), runs)


def test_one_acknowledged_post_is_reported_once() -> None:
    item = deliver(call(OK))
    assert (item.reported, item.duplicated, item.resent_after_lost_ack) == (True, 0, 0)


def test_retries_before_the_first_2xx_are_neither_duplicates_nor_resends() -> None:
    item = deliver(call(FAILED, 503), call(FAILED, None), call(OK))
    assert (item.attempts, item.duplicated, item.resent_after_lost_ack) == (3, 0, 0)


def test_a_resend_after_a_lost_ack_is_counted_apart() -> None:
    item = deliver(call(ACK_LOST, None), call(FAILED, 503), call(OK))
    assert (item.received, item.duplicated, item.resent_after_lost_ack) == (2, 0, 2)


def test_a_post_after_a_2xx_is_a_duplicate_whatever_its_answer() -> None:
    assert deliver(call(OK), call(OK)).duplicated == 1
    assert deliver(call(OK), call(FAILED, 503)).duplicated == 1


def test_two_acknowledged_posts_at_once_are_a_duplicate() -> None:
    first = call(OK, overlap=True)
    assert deliver(first, call(OK)).duplicated == 1


def test_two_different_final_responses_are_a_duplicate() -> None:
    item = deliver(call(ACK_LOST, None, body="COMPLETED"), call(OK, body="ERROR"))
    assert item.distinct_bodies == 2
    assert item.duplicated == 1


def test_a_second_run_is_a_duplicate_even_with_one_callback() -> None:
    assert deliver(call(OK), runs=2).duplicated == 1


def test_a_rollout_never_received_is_lost_and_fails_its_row() -> None:
    row = Row("f", "e")
    row.count([deliver(call(FAILED, 503), call(FAILED, 503), call(FAILED, 503))])
    assert (row.sent, row.reported, row.lost) == (1, 0, 1)
    assert not row.ok
    assert "lost" in row.summary()


def test_a_final_4xx_is_reported_and_a_post_after_it_is_caught() -> None:
    refused = deliver(call(REFUSED, 400))
    assert refused.reported and refused.sent_after_refusal == 0
    assert deliver(call(REFUSED, 400), call(OK)).sent_after_refusal == 1


def test_a_duplicated_rollout_fails_its_row() -> None:
    row = Row("f", "e")
    row.count([deliver(call(OK)), deliver(call(OK), call(OK))])
    assert (row.sent, row.reported, row.lost, row.duplicated) == (2, 2, 0, 1)
    assert not row.ok


def test_a_wrong_outcome_alone_fails_the_row() -> None:
    row = Row("f", "e")
    row.count([deliver(call(OK))])
    assert row.ok
    assert not row.check(False, "wrong status")
    assert not row.ok


def test_the_total_leaves_out_rows_that_count_other_rows_rollouts() -> None:
    first = Row("a", "e")
    first.count([deliver(call(OK)), deliver(call(ACK_LOST, None), call(OK))])
    again = Row("b", "e", distinct=False, sent=2, reported=2)
    assert totals([first, again]) == {
        "sent": 2,
        "reported": 2,
        "lost": 0,
        "duplicated": 0,
        "resent": 1,
        "failed_rows": 0,
    }


def test_the_table_has_every_column_and_marks_a_failed_row() -> None:
    good, bad = Row("fault a", "expected a", "measured a"), Row("fault b", "expected b")
    good.count([deliver(call(OK))])
    good.check_failure(deliver(call(OK)), None)
    bad.count([deliver(call(FAILED, 503))])
    lost = Row("fault c", "expected c", "measured c")
    lost.count([deliver(failed("worker_lost", retryable=True))])
    lost.check_failure(deliver(failed("worker_lost", retryable=True)), "worker_lost")
    text = render(
        [good, bad, lost],
        command="python -m bench.reliability",
        scale=FAST,
        seconds=1.0,
        when=datetime(2026, 1, 2, tzinfo=UTC),
    )
    assert (
        "| Fault | Expected outcome | Measured outcome | Category | Sent | Reported | Lost "
        "| Duplicated | Re-sent after lost ack |"
    ) in text
    assert "| fault a | expected a | measured a | none | 1 | 1 | 0 | 0 | 0 |" in text
    assert "| fault b | expected b | **FAIL** : lost: r: POSTs [failed:503], runs 1 | - |" in text
    assert "| fault c | expected c | measured c | 1 worker_lost | 1 | 1 | 0 | 0 | 0 |" in text
    assert "| FAIL (1 rows) | failures: 1 worker_lost | 3 | 2 | 1 | 0 | 0 |" in text
    assert "**FAIL**" in text and "FAIL (1 rows)" in text
    assert "`python -m bench.reliability`" in text and "2026-01-02" in text


@pytest.mark.parametrize(("lost", "code"), [(False, 0), (True, 1)])
def test_the_runner_exits_non_zero_when_a_row_fails(tmp_path: Path, lost: bool, code: int) -> None:
    row = Row("fault", "expected", "measured")
    row.count([deliver(call(FAILED, 503) if lost else call(OK))])
    out = tmp_path / "reliability.md"
    done = run_report(FAST, out=out, command="c", matrix=lambda scale, say: [row])
    assert done == code
    assert ("**PASS**" in out.read_text()) is not lost


def failed(category: str, *, retryable: bool, reward: float | None = None, **extra: Any) -> Call:
    """A completed-endpoint call TrainGate took, carrying an ERROR of ``category``."""
    base = call(OK, body="ERROR")
    failure = {"category": category, "retryable": retryable, "attempt": 1, **extra}
    body = {**(base.body or {}), "reward": reward}
    body["extra_fields"] = {"rollout_sdk": {"failure": failure}}
    return replace(base, body=body)


def test_the_category_traingate_received_is_checked_and_counted() -> None:
    row = Row("f", "e")
    row.check_failure(deliver(failed("worker_lost", retryable=True)), "worker_lost")
    row.check_failure(deliver(call(OK)), None)
    unclaimed = failed("never_started", retryable=True, attempt=0)
    row.check_failure(deliver(unclaimed), "never_started", attempt=0)
    assert row.ok, row.failures
    assert row.categories == Counter({"worker_lost": 1, "none": 1, "never_started": 1})
    assert categories_cell(row.categories) == "1 worker_lost, 1 none, 1 never_started"
    assert categories_cell(Counter({"none": 3})) == "none"
    assert categories_cell(Counter()) == "-"


@pytest.mark.parametrize(
    ("received", "expected", "wrong"),
    [
        (failed("infrastructure", retryable=True), "worker_lost", "failure category"),
        (call(OK), "timeout", "failure category None"),
        (failed("timeout", retryable=True), None, "failure category timeout"),
        (failed("timeout", retryable=False), "timeout", "expected retryable True"),
        (failed("cancelled", retryable=False, attempt=2), "cancelled", "attempt 1"),
        (failed("never_started", retryable=True, reward=0.0), "never_started", "reward 0.0"),
    ],
    ids=["other-category", "none", "unexpected", "retryable", "attempt", "reward"],
)
def test_a_wrong_failure_fails_the_row(received: Call, expected: str | None, wrong: str) -> None:
    row = Row("f", "e")
    row.check_failure(deliver(received), expected)
    assert not row.ok
    assert wrong in row.failures[0], row.failures


def test_an_agents_own_error_may_keep_its_reward_and_the_status_endpoint_must_agree() -> None:
    row = Row("f", "e")
    agents = deliver(failed("agent_error", retryable=False, reward=0.0))
    shown = {"failure": {"category": "agent_error", "retryable": False, "attempt": 1}}
    row.check_failure(agents, "agent_error", shown=shown)
    assert row.ok, row.failures
    row.check_failure(agents, "agent_error", shown={"failure": None})
    assert not row.ok and "status endpoint" in row.failures[0]


def turn(messages: list[dict[str, str]], outcome: str = OK) -> Call:
    """An answered chat call that sent ``messages``."""
    arrived = float(next(_clock))
    return Call(
        endpoint="chat",
        rollout_id="r",
        outcome=outcome,
        status=200,
        arrived=arrived,
        answered=arrived + 0.1,
        body={"rollout_id": "r", "messages": messages},
    )


@pytest.mark.parametrize(
    ("reported_turn", "ok"),
    [(3, True), (2, True), (1, False), (None, False)],
    ids=["last-turn", "answer-on-the-wire", "an-older-turn", "no-conversation"],
)
def test_a_timed_out_conversation_must_be_as_of_the_last_completed_turn(
    reported_turn: int | None, ok: bool
) -> None:
    user = {"role": "user", "content": "q"}
    reply = {"role": "assistant", "content": "a"}
    sent = [[user], [user, reply, user], [user, reply, user, reply, user]]
    chat = [turn(messages) for messages in sent]
    chat.append(turn([*sent[-1], reply, user], outcome=FAILED))  # a 503: not a turn
    final = [] if reported_turn is None else [*sent[reported_turn - 1], reply]
    row = Row("f", "e")
    check_last_turn(row, "r", {"final_messages": final}, chat)
    assert row.ok is ok, row.failures
