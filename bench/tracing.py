"""What the template's Tracing=subsegments costs a cold start, in fresh processes.

    python -m bench.tracing [--runs 15]

Two figures, each over ``runs`` fresh interpreters (after one warm-up), with ``LAMBDA_TASK_ROOT``
set as in Lambda so that Powertools Tracer turns on and the X-Ray SDK builds its Lambda recorder:

- **added**: ``import handler`` with the kit's subsegments off (untimed: that loads no X-Ray SDK,
  which each run checks), then, timed, what turning them on adds to the cold start: building the
  kit's tracer (:class:`rollout_sdk.aws.telemetry.XRaySpans`), which imports Powertools Tracer's
  X-Ray SDK and configures its recorder. The precise figure: nothing else is in the timed part.
- **whole**: ``import handler`` timed alone (:func:`testkit.imports.probe_import`,
  interpreter start-up not counted) with the subsegments off and on, in alternating order. The
  difference is the same cost, but within the noise of a ~0.7 s import on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from bench.common import Figure, child_env, report_and_exit
from testkit import REPO_ROOT
from testkit.imports import probe_import

STATEMENT = "import handler"

# Run in the child: the cold start with tracing off, then the tracer alone, timed.
_ADDED = """\
import sys, time
import handler
before = sorted(m for m in sys.modules if m.startswith("aws_xray_sdk"))
began = time.perf_counter()
from rollout_sdk.aws.telemetry import XRaySpans
XRaySpans()
seconds = time.perf_counter() - began
import json
print(json.dumps({"seconds": seconds, "xray_before": before}))
"""


def _env(tracing: bool) -> dict[str, str]:
    return child_env(
        {
            "AGENT_LOOP": "examples.calculator.agent:agent_loop",
            "TABLE_NAME": "bench",
            "LAMBDA_TASK_ROOT": str(REPO_ROOT),
            "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
        }
    )


@dataclass
class TracingRun:
    """Milliseconds per run: the tracer alone, and the whole import with it off and on."""

    added_ms: list[float] = field(default_factory=list)
    off_ms: list[float] = field(default_factory=list)
    on_ms: list[float] = field(default_factory=list)
    xray_loaded: dict[str, bool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "added_ms": Figure("ms", self.added_ms).to_json(),
            "whole": {
                "statement": STATEMENT,
                "off_ms": Figure("ms", self.off_ms).to_json(),
                "on_ms": Figure("ms", self.on_ms).to_json(),
                "difference_ms": Figure(
                    "ms", [on - off for on, off in zip(self.on_ms, self.off_ms, strict=True)]
                ).to_json(),
            },
            "xray_sdk_loaded": self.xray_loaded,
            "failures": self.failures,
        }


def _added(timeout: float = 60.0) -> tuple[float, list[str]]:
    done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
        [sys.executable, "-c", _ADDED],
        env=_env(False),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return float(report["seconds"]), list(report["xray_before"])


def run_tracing(runs: int = 15) -> TracingRun:
    """``runs`` fresh processes of each kind (after one warm-up each)."""
    result = TracingRun()
    for i in range(runs + 1):
        try:
            seconds, before = _added()
        except (subprocess.SubprocessError, ValueError, KeyError) as exc:
            result.failures.append(f"run {i}: {exc}")
            continue
        order = (False, True) if i % 2 else (True, False)
        probes = {t: probe_import(STATEMENT, env=_env(t), cwd=REPO_ROOT) for t in order}
        if not all(p.ok for p in probes.values()):
            result.failures.append(f"run {i}: {probes[True].error or probes[False].error}")
            continue
        result.xray_loaded = {
            "off": bool(before) or bool(probes[False].loaded(["aws_xray_sdk"])),
            "on": bool(probes[True].loaded(["aws_xray_sdk"])),
        }
        if i == 0:
            continue  # the warm-up
        result.added_ms.append(seconds * 1000)
        result.off_ms.append(probes[False].seconds * 1000)
        result.on_ms.append(probes[True].seconds * 1000)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes of each kind")
    args = parser.parse_args(argv)
    run = run_tracing(args.runs)
    report = run.to_json()
    whole = report["whole"]
    summary = (
        f"tracing on adds {report['added_ms']['median']} ms to the cold start (the kit's tracer "
        f"built after `import handler`; median of {len(run.added_ms)} fresh processes); whole "
        f"`import handler`: {whole['off_ms']['median']} ms off, {whole['on_ms']['median']} ms on "
        f"(difference {whole['difference_ms']['median']} ms, within the import's noise); X-Ray "
        f"SDK loaded: {run.xray_loaded}"
    )
    return report_and_exit(report, [summary])


if __name__ == "__main__":
    sys.exit(main())
