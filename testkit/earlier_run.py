"""An earlier ``make bench`` results file beside this run's: what of it the chart and the summary
show (``bench/bench.py``), here so that the tests check it without importing the bench."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from testkit import REPO_ROOT

#: The bare client the server's CPU per rollout is a ratio of.
CPU_BASELINE = "baseline_aiohttp"  # bench.throughput's BASELINE with its aiohttp client


def before_of(path: Path) -> dict[str, Any]:
    """The earlier run's file, date, commit and server CPU ratios (each store's median and
    runs, as its ``figures.cpu_vs_baseline`` holds them)."""
    earlier = json.loads(path.read_text(encoding="utf-8"))
    ratios = {
        store: by_base.get(f"vs_{CPU_BASELINE}")
        for store, by_base in (earlier.get("figures", {}).get("cpu_vs_baseline") or {}).items()
    }
    return {
        "file": os.path.relpath(path, REPO_ROOT),
        "date": earlier.get("date"),
        "commit": ((earlier.get("versions") or {}).get("rollout-sdk") or {}).get("commit"),
        "cpu_vs_baseline": {k: v for k, v in ratios.items() if v},
    }


def _shown(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.2f}"


def before_lines(results: dict[str, Any]) -> list[str]:
    """The summary's lines: each store's ratio in this run beside the earlier run's."""
    before = results.get("before") or {}
    figures = results.get("figures", {}).get("cpu_vs_baseline", {})
    lines = []
    for store, ratio in (before.get("cpu_vs_baseline") or {}).items():
        now = (figures.get(store) or {}).get(f"vs_{CPU_BASELINE}") or {}
        lines.append(
            f"{store}: server CPU over {CPU_BASELINE}'s {_shown(now.get('median'))}, before "
            f"{_shown(ratio.get('median'))} ({before.get('file')}, commit "
            f"{(before.get('commit') or '?')[:10]})"
        )
    return lines
