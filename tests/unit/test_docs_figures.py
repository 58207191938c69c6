"""The figures the docs quote from ``make bench`` held to its last results,
``bench/results/latest.json``: docs/performance.md's run (its date, commit and machine), its
throughput table, cell by cell, and the CPU ratios' three runs; and the duration README, the
Makefile and docs/performance.md give ``make bench``. A new ``make bench`` that moves a figure
fails this until the docs say the new one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
RESULTS: dict[str, Any] = json.loads((ROOT / "bench" / "results" / "latest.json").read_text())
FIGURES = RESULTS["figures"]
PERFORMANCE = (ROOT / "docs" / "performance.md").read_text()

ROWS = {
    "baseline": "baseline",
    "baseline_httpx": "baseline_httpx",
    "baseline_aiohttp": "baseline_aiohttp",
    "`--store memory`": "memory",
    "`--store sqlite`": "sqlite",
    "`--store dynamodb` (embedded moto, its own process)": "dynamodb",
}


def _table() -> dict[str, list[str]]:
    """docs/performance.md's throughput table, its cells by row name."""
    start = PERFORMANCE.index("| | rollouts/s |")
    block = PERFORMANCE[start : PERFORMANCE.index("\n\n", start)]
    rows = [line.strip().strip("|").split("|") for line in block.splitlines()[2:]]
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}


def _number(cell: str) -> float:
    found = re.match(r"[\d.]+", cell)
    assert found, f"no figure in {cell!r}"
    return float(found.group(0))


def test_the_run_named_is_the_results_file_s() -> None:
    first = " ".join(PERFORMANCE.split("\n\n")[1].split())  # the paragraph under the title
    machine = RESULTS["machine"]
    assert RESULTS["date"][:10] in first
    assert f"`{RESULTS['versions']['rollout-sdk']['commit'][:7]}`" in first
    assert f"Python {machine['python']}" in first
    assert f"{machine['cores']}-core {machine['cpu_model']}" in first


def test_the_throughput_table_is_the_results_file_s() -> None:
    table = _table()
    assert set(table) == set(ROWS), sorted(table)
    wrong: list[str] = []
    for row, name in ROWS.items():
        cells, figures = table[row], FIGURES["throughput"][name]
        rate = figures["rollouts_per_s"]["median"]
        if _number(cells[0]) != round(rate):
            wrong.append(f"{row} rollouts/s {cells[0]} (results: {rate:.0f})")
        cpu = figures["cpu_ms_per_rollout"]["median"]
        shown = _number(cells[5])
        if abs(shown - cpu) > 0.006 + cpu * 0.005:  # 2 decimals, or 3 figures past 10
            wrong.append(f"{row} CPU {cells[5]} (results: {cpu:.2f})")
        if name in FIGURES["kit_vs_baseline"]:
            for column, baseline in enumerate(("baseline", "baseline_httpx", "baseline_aiohttp")):
                ratio = FIGURES["kit_vs_baseline"][name][f"vs_{baseline}"]["median"]
                if f"{_number(cells[1 + column]):.2f}" != f"{ratio:.2f}":
                    wrong.append(f"{row} / {baseline} {cells[1 + column]} (results: {ratio:.2f})")
            latency = [round(figures[f"init_ms_{p}"]["median"]) for p in ("p50", "p95", "p99")]
            if re.findall(r"\d+", cells[4].split("(")[0]) != [str(ms) for ms in latency]:
                wrong.append(f"{row} init {cells[4]} (results: {latency})")
    assert not wrong, "; ".join(wrong)


def test_the_cpu_ratios_three_runs_are_the_results_file_s() -> None:
    for store in ("memory", "sqlite"):
        runs = FIGURES["cpu_vs_baseline"][store]["vs_baseline_aiohttp"]["runs"]
        quoted = " / ".join(f"{run:.2f}" for run in runs)
        assert f"{store} {quoted}" in " ".join(PERFORMANCE.split()), (
            f"{store}: the results say {quoted}"
        )


def test_make_bench_s_duration_is_the_one_it_took() -> None:
    minutes = RESULTS["elapsed_seconds"] / 60
    said = {
        "README.md": (ROOT / "README.md").read_text(),
        "Makefile": (ROOT / "Makefile").read_text(),
        "docs/performance.md": PERFORMANCE,
    }
    for where, text in said.items():
        (quoted,) = re.findall(r"bench.{0,60}?about (\d+) minutes", text, re.S)
        assert abs(int(quoted) - minutes) <= 2, (
            f"{where}: about {quoted} minutes; took {minutes:.1f}"
        )
