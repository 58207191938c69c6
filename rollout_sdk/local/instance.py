"""One emulated Lambda instance: ``python -m rollout_sdk.local.instance FUNCTION TIMEOUT``.

It imports ``handler.py`` once (the instance's cold start) in the environment it was started
with (the function's, as ``rollout-sdk start-api`` resolves it from the template), then runs
one invocation at a time, as one Lambda instance does: each line it reads on stdin is an event
(JSON), and for each it writes one line on stdout, ``{"result": ..., "dispatched": [...]}``: the
handler's answer, and the worker events the invocation handed off. Everything else the handler
writes (its log lines, its metrics) goes to stderr, so stdout carries only the answers.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logical_id, timeout = args[0], float(args[1])
    from rollout_sdk.local.invoke import import_handler, invoke, results_channel

    # The answers alone on stdout, before anything logs (Powertools' logger writes to sys.stdout).
    answers = results_channel()

    module = import_handler({})
    for line in sys.stdin:
        event: Any = json.loads(line)
        call = invoke(module, logical_id, event, timeout_seconds=timeout)
        answers.write(
            json.dumps({"result": call.result, "dispatched": call.dispatched}, default=str) + "\n"
        )
        answers.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
