"""Checkouts of the repository measured side by side: what :mod:`bench.compare` (CPU ratios)
and :mod:`bench.instructions` (callgrind's counts) share. Each run is a fresh child process in
its tree (``PYTHONPATH=TREE``), the trees alternated within each round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import child_env

#: One run's figures by name (each store's, and whatever else the child reports).
Row = dict[str, float]


def tree_problem(prog: str, trees: Sequence[Path], rounds: int, max_rounds: int) -> str | None:
    """Why these arguments cannot run, naming the one to fix; None when they can."""
    missing = [str(t) for t in trees if not (t / "rollout_sdk").is_dir()]
    if missing:
        return f"{prog}: not a checkout: {', '.join(missing)}"
    if not 1 <= rounds <= max_rounds:
        return f"{prog}: --rounds {rounds}: give 1 to {max_rounds}"
    return None


def run_in_tree(tree: Path, code: str, args: Sequence[str], *, timeout: float) -> Row:
    """``python -c CODE ARGS`` in ``tree``: its last stdout line, a JSON object of figures (a
    ``failures`` list in it, if not empty, is raised as RuntimeError, as is a failed exit)."""
    done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=child_env({"PYTHONPATH": str(tree)}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: exited {done.returncode}: {done.stderr[-500:]}")
    raw: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    failures = raw.pop("failures", [])
    if failures:
        raise RuntimeError(f"{tree}: runs failed: {failures}")
    return {name: float(value) for name, value in raw.items()}


def alternate(
    trees: Sequence[Path],
    rounds: int,
    run: Callable[[Path], Row],
    shown: Callable[[Row], str],
) -> dict[Path, list[Row]]:
    """``rounds`` rounds of ``run`` in each tree in turn, each run printed as it ends."""
    seen: dict[Path, list[Row]] = {tree: [] for tree in trees}
    for number in range(1, rounds + 1):
        for tree in trees:
            row = run(tree.resolve())
            seen[tree].append(row)
            print(f"round {number} {os.path.basename(tree)}: {shown(row)}", flush=True)
    return seen
