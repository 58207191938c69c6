"""`make bench`'s durable replay figure (bench/durable_replay.py), run small as its own process:
every execution replays what it recorded, and the report counts what it measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.timeout(120)


def test_the_replay_bench_replays_each_size_and_reports_its_growth() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.durable_replay", "--turns", "4,12", "--runs", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    report = json.loads(line.removeprefix("BENCH-RESULT "))
    assert report["failures"] == []
    assert [c["turns"] for c in report["cases"]] == [4, 12]
    for case in report["cases"]:
        assert len(case["replay_ms"]) == 2 and all(ms > 0 for ms in case["replay_ms"])
    (growth,) = report["growth"]
    assert (growth["from"], growth["to"]) == (4, 12) and growth["exponent"] > 0
    assert "durable replay, 12 turns:" in done.stderr
