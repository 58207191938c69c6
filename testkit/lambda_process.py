"""One Lambda execution environment as a process: ``handler.py`` imported afresh, one
invocation, its result written to a file (the AWS rig's crash tests SIGKILL it).

    python -m testkit.lambda_process EVENT_JSON FUNCTION TIMEOUT_SECONDS OUT_JSON

The function's environment comes from this process's own (the rig sets it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rollout_sdk.local.invoke import LocalLambdaContext, import_handler


def main(argv: list[str] | None = None) -> int:
    event_path, function, timeout, out_path = (sys.argv[1:] if argv is None else argv)[:4]
    handler = import_handler({})  # the rig set this process's environment
    event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    context = LocalLambdaContext(function_name=function, timeout_seconds=float(timeout))
    result = getattr(handler, function)(event, context)
    Path(out_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
