"""What a run shows as it goes and at its end: a progress bar, and the percentiles of its
summary (``rollout-sdk demo`` and ``rollout-sdk test`` both)."""

from __future__ import annotations

import math
import sys
from typing import TextIO


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class Progress:
    """A plain-text progress bar: redrawn with ``\\r`` on a terminal, else a line every ~10%."""

    def __init__(self, total: int, *, label: str, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = -1
        self._decile = -1

    def update(self, done: int) -> None:
        """Show ``done`` of ``total`` (drawn only when it changed)."""
        done = min(done, self.total)
        if done == self._shown:
            return
        self._shown = done
        if self.tty:
            width = 30
            filled = width * done // self.total
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r{self.label} [{bar}] {done}/{self.total}")
            self.stream.flush()
            return
        decile = 10 * done // self.total
        if decile > self._decile:
            self._decile = decile
            self.stream.write(f"{self.label}: {done}/{self.total} ({100 * done // self.total}%)\n")
            self.stream.flush()

    def finish(self) -> None:
        """End the bar's line on a terminal."""
        if self.tty and self._shown >= 0:
            self.stream.write("\n")
            self.stream.flush()
