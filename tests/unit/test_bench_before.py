"""make bench shows the earlier run's CPU ratios beside this run's (``before``): read from an
earlier results file, printed in the summary."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench import CPU_BASELINE, before_of, summary
from testkit import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results"


def _with_ratios(tmp_path: Path, memory: float, commit: str) -> Path:
    path = tmp_path / "earlier.json"
    ratio = {"median": memory, "runs": [memory, memory + 1, memory - 1], "unit": "ratio"}
    path.write_text(
        json.dumps(
            {
                "date": "2026-12-01T00:00:00Z",
                "versions": {"rollout-sdk": {"commit": commit}},
                "figures": {"cpu_vs_baseline": {"memory": {f"vs_{CPU_BASELINE}": ratio}}},
            }
        ),
        encoding="utf-8",
    )
    return path


def test_before_of_reads_the_earlier_ratios(tmp_path: Path) -> None:
    before = before_of(_with_ratios(tmp_path, 4.25, "abc1234def"))
    assert before["commit"] == "abc1234def"
    assert before["cpu_vs_baseline"]["memory"]["median"] == 4.25
    assert set(before["cpu_vs_baseline"]) == {"memory"}


def test_the_summary_prints_the_earlier_run_beside_this_one(tmp_path: Path) -> None:
    results = json.loads((RESULTS / "latest.json").read_text(encoding="utf-8"))
    results["before"] = before_of(_with_ratios(tmp_path, 4.25, "abc1234def"))
    now = results["figures"]["cpu_vs_baseline"]["memory"][f"vs_{CPU_BASELINE}"]["median"]
    (line,) = [x for x in summary(results).splitlines() if "before 4.25" in x]
    assert line.startswith(f"memory: server CPU over {CPU_BASELINE}'s {now:.2f}")
    assert "commit abc1234def" in line
