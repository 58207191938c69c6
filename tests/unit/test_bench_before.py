"""make bench shows the earlier run's CPU ratios beside this run's (``before``): read from an
earlier results file, printed in the summary (testkit.earlier_run, which the bench uses)."""

from __future__ import annotations

import json
from pathlib import Path

from testkit import REPO_ROOT
from testkit.earlier_run import CPU_BASELINE, before_lines, before_of


def _earlier(tmp_path: Path) -> Path:
    path = tmp_path / "earlier.json"
    ratio = {"median": 4.25, "runs": [4.25, 5.25, 3.25], "unit": "ratio"}
    path.write_text(
        json.dumps(
            {
                "date": "2026-12-01T00:00:00Z",
                "versions": {"rollout-sdk": {"commit": "abc1234def"}},
                "figures": {"cpu_vs_baseline": {"memory": {f"vs_{CPU_BASELINE}": ratio}}},
            }
        ),
        encoding="utf-8",
    )
    return path


def test_the_summary_prints_the_earlier_run_beside_this_one(tmp_path: Path) -> None:
    results = json.loads((REPO_ROOT / "bench/results/latest.json").read_text(encoding="utf-8"))
    results["before"] = before_of(_earlier(tmp_path))
    assert results["before"]["commit"] == "abc1234def"
    assert set(results["before"]["cpu_vs_baseline"]) == {"memory"}
    now = results["figures"]["cpu_vs_baseline"]["memory"][f"vs_{CPU_BASELINE}"]["median"]
    (line,) = before_lines(results)
    assert line.startswith(f"memory: server CPU over {CPU_BASELINE}'s {now:.2f}, before 4.25")
    assert "commit abc1234def" in line


def test_without_an_earlier_run_nothing_is_printed() -> None:
    assert before_lines({"figures": {}}) == []
