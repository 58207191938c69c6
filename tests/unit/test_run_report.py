"""The one report of ``rollout-sdk demo`` and ``rollout-sdk test``: one number format, one
summary whichever TrainGate side the rollouts talked to, one error line."""

from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

import pytest

from rollout_sdk.local.report import (
    MISSING,
    STDOUT,
    RowOutcome,
    RunReport,
    fail,
    fmt_ms,
    format_summary,
    outcome_of,
    write_output,
)


def _body(status: str = "COMPLETED", **metrics: float) -> dict[str, object]:
    return {
        "rollout_id": "r",
        "status": status,
        "reward": 1.0 if status == "COMPLETED" else None,
        "finish_reason": "stop",
        "metrics": {"num_llm_calls": 2, "llm_latency_ms": 10.0, **metrics},
    }


def test_one_millisecond_format() -> None:
    assert fmt_ms(3.14159) == "3.1"
    assert fmt_ms(1234.56) == "1234.6"
    assert fmt_ms(math.nan) == "-"


def test_the_summary_counts_every_status_and_category_and_names_the_failures() -> None:
    outcomes = [
        outcome_of(0, _body(total_latency_ms=12.25), duration_ms=20.0, init_ms=2.0),
        outcome_of(
            1, _body("ERROR"), duration_ms=30.0, init_ms=3.0, failure=("timeout", "too slow")
        ),
        RowOutcome(2, False, MISSING, "no final response", 50.0, category="lost", init_ms=1.0),
    ]
    report = RunReport(outcomes, total_duration_ms=1000.0, timed_out=True, not_run=1)
    summary = format_summary(report, title="T")
    lines = summary.splitlines()
    assert lines[0] == "T"
    assert "  rollouts                         4" in lines
    assert "  COMPLETED                        1" in lines
    assert "  ERROR                            1" in lines
    assert "  missing                          1" in lines
    assert "  not run                          1" in lines
    assert "    lost                           1" in lines and "    timeout      " in summary
    # The one rollout that sent its total latency; the other rows have none to count.
    assert re.search(r"^  rollout total_latency\s+12\.2\s+12\.2\s+12\.2$", summary, re.M)
    assert "  row 1: too slow" in lines and "  row 2: no final response" in lines
    assert lines[-1] == (
        "FAILED: timed out waiting for callbacks; 1 never reported; 1 ERROR (1 timeout); 1 not run"
    )
    assert not report.ok


def test_a_clean_run_is_ok_and_duplicates_are_not() -> None:
    outcomes = [outcome_of(0, _body(), duration_ms=5.0, init_ms=1.0)]
    clean = RunReport(outcomes, total_duration_ms=10.0)
    assert clean.ok
    assert format_summary(clean, title="T").endswith(
        "OK: every rollout was reported exactly once, none ERROR"
    )
    doubled = RunReport(outcomes, total_duration_ms=10.0, duplicates=1)
    assert not doubled.ok
    assert format_summary(doubled, title="T").endswith("FAILED: 1 duplicate callbacks")


def test_the_error_line_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("rollout-sdk demo", "bad dataset", 2) == 2
    assert capsys.readouterr().err == "rollout-sdk demo: error: bad dataset\n"


def _clean_report() -> RunReport:
    return RunReport([outcome_of(0, _body(), duration_ms=5.0, init_ms=1.0)], total_duration_ms=10.0)


def test_the_results_file_is_written_whole_its_folder_made(tmp_path: Path) -> None:
    target = tmp_path / "out" / "results.json"
    write_output(str(target), _clean_report())
    assert json.loads(target.read_text())["summary"]["passed"] == 1
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]


def test_a_failed_write_leaves_the_old_results_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    target.write_text('{"old": true}\n')

    def fails(_source: object, _target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fails)  # the one report.py renames with
    with pytest.raises(OSError, match="No space left"):
        write_output(str(target), _clean_report())
    assert target.read_text() == '{"old": true}\n'
    assert os.listdir(tmp_path) == ["results.json"]


def test_dash_writes_the_results_alone_on_the_stream(capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO()
    write_output(STDOUT, _clean_report(), stdout=stream)
    assert list(json.loads(stream.getvalue())) == ["summary", "results"]
    assert capsys.readouterr() == ("", "")  # nothing else, and no file named "-"
    assert not Path(STDOUT).exists()
