"""What a run shows as it goes (``rollout-sdk demo`` and ``rollout-sdk test`` both): a bar on a
terminal, a line per finished rollout otherwise."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rollout_sdk.local.report import RowOutcome


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


def row_line(outcome: RowOutcome, done: int, total: int) -> str:
    """The line a finished rollout prints when the output is not a terminal (v1's)."""
    tokens = outcome.token_usage.get("total_tokens", 0)
    line = (
        f"[{done}/{total}] row {outcome.row_index}: {'OK' if outcome.success else 'FAILED'} "
        f"({outcome.duration_ms / 1000:.1f}s, {tokens:,} tokens)"
    )
    if not outcome.success and outcome.error:
        error = " ".join(outcome.error.split())
        line += " - " + (error[:97] + "..." if len(error) > 100 else error)
    return line


class RowProgress:
    """A bar on a terminal; otherwise a line per finished rollout (v1's lines); nothing when
    quiet."""

    def __init__(self, total: int, *, quiet: bool, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.quiet = quiet
        self.done = 0
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = (
            Progress(total, label="rollouts", stream=self.stream) if tty and not quiet else None
        )

    def __call__(self, outcome: RowOutcome) -> None:
        self.done += 1
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(self.done)
        else:
            self.stream.write(row_line(outcome, self.done, self.total) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.finish()
