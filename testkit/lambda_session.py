"""One Lambda execution environment as a process, for several invocations: ``handler.py`` imported
afresh (a cold start, in the environment the test gave this process), then each step of a plan
run through its entry point, with the trace header Lambda gives that invocation.

    python -m testkit.lambda_session PLAN_JSON OUT_JSON

The plan is a JSON list of steps, each ``{"function": "ApiFunction", "event": {...},
"trace": "Root=...;Parent=...;Sampled=1", "timeout": 29}``; an ``"event"`` of ``"dispatched"``
is the job the previous step handed to the worker (which the emulator only records). Before each
step a line ``=== step N FUNCTION ===`` goes to stdout, so the test can tell which invocation
wrote which lines (run it with PYTHONUNBUFFERED=1). The results go to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from rollout_sdk.local.invoke import import_handler, invoke

MARKER = "=== step {index} {function} ==="


def main(argv: list[str] | None = None) -> int:
    plan_path, out_path = (sys.argv[1:] if argv is None else argv)[:2]
    steps: list[dict[str, Any]] = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    handler = import_handler({})  # the test set this process's environment
    results: list[dict[str, Any]] = []
    dispatched: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        event = dispatched[0] if step["event"] == "dispatched" else step["event"]
        os.environ["_X_AMZN_TRACE_ID"] = step["trace"]  # as Lambda sets it per invocation
        print(MARKER.format(index=index, function=step["function"]), flush=True)
        call = invoke(handler, step["function"], event, timeout_seconds=float(step["timeout"]))
        dispatched = call.dispatched
        results.append({"function": step["function"], "result": call.result})
    handler.runtime.close()
    Path(out_path).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
