"""The one guard every figure of the cost estimate is made under: nothing here may fail a
rollout, so a figure that cannot be made is logged once (per kind of figure) and left out."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

# The name the estimate logged under before it was split out of engine/cost.py (log filters).
logger = logging.getLogger("rollout_sdk.engine.cost")

_warned: set[str] = set()


@contextmanager
def figure(what: str, *errors: type[Exception]) -> Iterator[None]:
    """Make ``what``; an exception (one of ``errors``, else any) is swallowed and logged once
    per ``what``. Code after the block runs on failure: put the fallback there."""
    caught: tuple[type[Exception], ...] = errors or (Exception,)
    try:
        yield
    except caught as exc:
        if what not in _warned:
            _warned.add(what)
            logger.warning(
                "cost estimate: %s failed; left out: %s: %s", what, type(exc).__name__, exc
            )
