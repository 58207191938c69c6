"""Bounded waits: poll a condition until it holds or a deadline passes, never a bare sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class WaitTimeout(AssertionError):
    """A condition did not hold within its deadline (an AssertionError, so a test fails)."""


def wait_until(
    predicate: Callable[[], bool],
    *,
    within: float = 10.0,
    what: str = "the condition",
    every: float = 0.02,
) -> None:
    """Poll ``predicate`` until it holds; WaitTimeout naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what} did not happen within {within:g} s")
        time.sleep(every)


async def until(
    check: Callable[[], Awaitable[bool]],
    *,
    within: float = 10.0,
    what: str = "the condition",
    every: float = 0.02,
) -> None:
    """Await ``check`` until it holds; WaitTimeout naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what} did not happen within {within:g} s")
        await asyncio.sleep(every)


async def until_true(
    predicate: Callable[[], bool],
    *,
    within: float = 10.0,
    what: str = "the condition",
    every: float = 0.02,
) -> None:
    """:func:`until` for a plain predicate, from async code."""

    async def check() -> bool:
        return predicate()

    await until(check, within=within, what=what, every=every)
