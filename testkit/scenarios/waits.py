"""Bounded waits of the scenarios: each polls a condition until a deadline, then raises
:class:`ScenarioError` naming what did not happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from rollout_sdk.testing.standin import TrainGateStandIn
from testkit import wait
from testkit.rigs import (
    record_of,
    records_of,
)
from testkit.scenarios.base import (
    TERMINAL,
    Say,
    ScenarioError,
    delivery,
)


async def until(check: Callable[[], Awaitable[bool]], *, within: float, what: str) -> None:
    """Poll ``check`` until it holds; ScenarioError naming ``what`` after ``within`` s."""
    try:
        await wait.until(check, within=within, what=what, every=0.05)
    except wait.WaitTimeout as exc:
        raise ScenarioError(str(exc)) from exc


def holds(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """A plain predicate as :func:`until` wants it."""

    async def check() -> bool:
        return predicate()

    return check


def is_reported(standin: TrainGateStandIn, rollout_id: str) -> Callable[[], Awaitable[bool]]:
    """For :func:`until`: TrainGate has a final response for ``rollout_id``."""
    return holds(lambda: delivery(standin, rollout_id).reported)


def in_state(
    client: httpx.AsyncClient, rollout_id: str, states: Sequence[str]
) -> Callable[[], Awaitable[bool]]:
    """For :func:`until`: the server's record of ``rollout_id`` is in one of ``states``."""

    async def check() -> bool:
        record = await record_of(client, rollout_id)
        return record is not None and record["state"] in states

    return check


def past_turn(
    standin: TrainGateStandIn, rollout_ids: Sequence[str], turns: int
) -> Callable[[], Awaitable[bool]]:
    """For :func:`until`: every rollout has had ``turns`` chat calls answered."""
    return holds(lambda: all(standin.chat_count(r) >= turns for r in rollout_ids))


async def wait_reported(
    standin: TrainGateStandIn,
    rollout_ids: Sequence[str],
    *,
    within: float,
    label: str,
    say: Say,
) -> None:
    """Until TrainGate has a final response (taken or refused) for every rollout."""
    deadline = time.monotonic() + within
    shown = -1.0
    while True:
        done = sum(1 for r in rollout_ids if delivery(standin, r).reported)
        now = time.monotonic()
        if now - shown >= 5 or done == len(rollout_ids):
            say(f"   {label}: {done}/{len(rollout_ids)} reported")
            shown = now
        if done == len(rollout_ids):
            return
        if now > deadline:
            raise ScenarioError(
                f"{label}: only {done} of {len(rollout_ids)} rollouts reported within {within:g} s"
            )
        await asyncio.sleep(0.1)


async def wait_terminal(
    client: httpx.AsyncClient, rollout_ids: Sequence[str], *, within: float
) -> dict[str, dict[str, Any] | None]:
    """Records once each is DELIVERED or UNDELIVERABLE (or as they are when ``within`` ends)."""
    deadline = time.monotonic() + within
    found: dict[str, dict[str, Any] | None] = {}
    waiting = list(rollout_ids)
    while waiting:
        fetched = await records_of(client, waiting)
        found.update(fetched)
        waiting = [r for r, rec in fetched.items() if rec is None or rec["state"] not in TERMINAL]
        if not waiting or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return found


async def drain(standin: TrainGateStandIn, *, within: float = 20.0) -> None:
    """Until the stand-in holds no call (a hanging fault answers, or gives up, first)."""
    await until(
        holds(lambda: standin.pending_total() == 0), within=within, what="hanging calls ending"
    )
