"""A small run of the outside load driver against a real ``rollout-sdk serve`` subprocess."""

from __future__ import annotations

import io

import pytest

from testkit.load import run_load

pytestmark = pytest.mark.integration


def test_small_load_run_passes_every_check() -> None:
    progress = io.StringIO()
    report = run_load(
        rollouts=40, concurrency=10, store="sqlite", deadline=60, progress_stream=progress
    )
    assert report.ok, report.summary()
    assert report.failures == []
    assert report.statuses == {"COMPLETED": 40}
    assert report.duplicates == 0
    assert len(report.init_ms) == 40
    assert report.peak_inits_in_flight == 10
    assert report.wall_seconds > 0
    assert "PASS" in report.summary()
    assert progress.getvalue().splitlines()[-1] == "called back: 40/40 (100%)"
