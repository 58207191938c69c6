"""make bench shows the earlier run's CPU ratios beside this run's (``before``): read from an
earlier results file, printed in the summary. (Run in a subprocess: the tests do not import
the bench, tests/unit/test_layout.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testkit import REPO_ROOT

SCRIPT = """
import json, sys
from pathlib import Path
from bench.bench import before_of, summary
results = json.loads(Path("bench/results/latest.json").read_text(encoding="utf-8"))
results["before"] = before_of(Path(sys.argv[1]))
print(json.dumps({"before": results["before"], "summary": summary(results),
                  "now": results["figures"]["cpu_vs_baseline"]["memory"]}))
"""


def _earlier(tmp_path: Path) -> Path:
    path = tmp_path / "earlier.json"
    ratio = {"median": 4.25, "runs": [4.25, 5.25, 3.25], "unit": "ratio"}
    path.write_text(
        json.dumps(
            {
                "date": "2026-12-01T00:00:00Z",
                "versions": {"rollout-sdk": {"commit": "abc1234def"}},
                "figures": {"cpu_vs_baseline": {"memory": {"vs_baseline_aiohttp": ratio}}},
            }
        ),
        encoding="utf-8",
    )
    return path


def test_the_summary_prints_the_earlier_run_beside_this_one(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(_earlier(tmp_path))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["before"]["commit"] == "abc1234def"
    assert set(out["before"]["cpu_vs_baseline"]) == {"memory"}
    now = out["now"]["vs_baseline_aiohttp"]["median"]
    (line,) = [x for x in out["summary"].splitlines() if "before 4.25" in x]
    assert line.startswith(f"memory: server CPU over baseline_aiohttp's {now:.2f}")
    assert "commit abc1234def" in line
