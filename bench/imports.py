"""The agent author's import time, as a ratio to ``from pydantic import BaseModel``.

    python -m bench.imports [--runs 15]

Each run spawns two fresh interpreters side by side, one for the author's import
(:data:`testkit.imports.AUTHOR_IMPORT`) and one for the baseline, and times the
statement alone inside each (start-up is not counted); the ratio is taken per run, so a busy
moment slows both sides of it. One warm-up pair first (bytecode, disk cache). Every run also
lists what the author's import loaded of the server's modules (none, when all is well).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from bench.common import Figure, child_env, report_and_exit
from testkit.imports import AUTHOR_IMPORT, SERVER_MODULES, probe_import

BASELINE_IMPORT = "from pydantic import BaseModel"
#: "at most 2.0 x ``from pydantic import BaseModel``"
GOAL_RATIO = 2.0


@dataclass
class ImportsRun:
    """Paired runs: the author's import and the baseline, in ms, and the server modules loaded."""

    author_ms: list[float] = field(default_factory=list)
    baseline_ms: list[float] = field(default_factory=list)
    server_modules: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "statement": AUTHOR_IMPORT,
            "baseline": BASELINE_IMPORT,
            "author_ms": Figure("ms", self.author_ms).to_json(),
            "baseline_ms": Figure("ms", self.baseline_ms).to_json(),
            "ratio": Figure(
                "ratio", [a / b for a, b in zip(self.author_ms, self.baseline_ms, strict=True)]
            ).to_json(),
            "server_modules_loaded": self.server_modules,
            "failures": self.failures,
        }


def run_imports(runs: int = 15) -> ImportsRun:
    """``runs`` fresh-process pairs (after one warm-up pair) of the author's import and the
    baseline."""
    result = ImportsRun()
    env = child_env()
    for i in range(runs + 1):
        author = probe_import(AUTHOR_IMPORT, env=env)
        baseline = probe_import(BASELINE_IMPORT, env=env)
        if not (author.ok and baseline.ok):
            result.failures.append(f"run {i}: {author.error or baseline.error}")
            continue
        if i == 0:
            continue  # the warm-up pair
        result.author_ms.append(author.seconds * 1000)
        result.baseline_ms.append(baseline.seconds * 1000)
        result.server_modules = sorted(
            set(result.server_modules) | set(author.loaded(SERVER_MODULES))
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh-process pairs (default 15)")
    args = parser.parse_args(argv)
    run = run_imports(args.runs)
    report = run.to_json()
    ratio = report["ratio"]["median"]
    summary = (
        f"author import {report['author_ms']['median']} ms, baseline "
        f"{report['baseline_ms']['median']} ms: {ratio}x (goal at most {GOAL_RATIO:g}x; median "
        f"of {len(run.author_ms)} fresh-process pairs); server modules loaded: "
        f"{', '.join(run.server_modules) or 'none'}"
    )
    return report_and_exit(report, [summary])


if __name__ == "__main__":
    sys.exit(main())
