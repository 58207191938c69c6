"""The local server's log lines: one line each on stderr, with the time, the level, the
logger, the rollout it is about and what the record names beside its message (a category, an
error), the way the Lambda functions' JSON lines carry them (Powertools' Logger there).

The standard library's own formatter is used (not Powertools' JSON one: a person reads these
lines in a terminal); only the names it leaves out are added after the message."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rollout_sdk.telemetry import RolloutLogFilter

#: What a record may carry beside its message that the line shows (``extra=`` of the kit's calls).
SHOWN = ("rollout_id", "category", "error", "state", "attempt", "reason")


class LocalFormatter(logging.Formatter):
    """``2026-12-06 22:40:01 WARNING rollout_sdk.engine.worker: message rollout_id=r-1 ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        first, _, rest = line.partition("\n")
        extra = " ".join(f"{k}={getattr(record, k)}" for k in SHOWN if hasattr(record, k))
        first = f"{first} {extra}" if extra else first
        return f"{first}\n{rest}" if rest else first


@contextmanager
def configured(level: int = logging.INFO) -> Iterator[logging.Handler]:
    """One handler on the kit's logger (``rollout_sdk``) while the block runs: its lines to
    stderr, as above; the logger as it was after."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LocalFormatter())
    handler.addFilter(RolloutLogFilter())
    kit = logging.getLogger("rollout_sdk")
    was = (kit.level, kit.propagate)
    kit.addHandler(handler)
    kit.setLevel(level)
    kit.propagate = False
    try:
        yield handler
    finally:
        kit.removeHandler(handler)
        kit.setLevel(was[0])
        kit.propagate = was[1]
