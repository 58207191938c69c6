"""What most reliability tests assert of a scenario's row."""

from __future__ import annotations

from testkit.scenarios.base import NO_FAILURE, Row


def assert_reported_once(row: Row, rollouts: int, category: str = NO_FAILURE) -> None:
    """``row`` passed and counted ``rollouts`` rollouts, every one reported, and every final
    response TrainGate received carries the failure ``category`` (``"none"``: no failure)."""
    assert row.ok, row.summary()
    assert row.sent == row.reported == rollouts, row.summary()
    assert row.categories == {category: rollouts}, f"categories {dict(row.categories)}"
