"""One cold start, in a fresh process started by :mod:`bench.aws` (never run it by hand).

    python -m bench.coldchild bare|api|worker [EVENT_FILE]

Only the standard library is imported before the timed part. ``bare`` imports fastapi, mangum,
boto3 and aws_lambda_powertools; ``api`` imports ``handler.py`` and sends the init event through
``handler.api``; ``worker`` imports it and runs the worker event through ``handler.worker``. The
imports run under a network guard: an audit hook that fails any connect or name lookup. Prints
one ``BENCH-RESULT`` line of JSON with ``time.monotonic()`` stamps (the clock is shared by every process of the machine).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

_BLOCKED = (
    "socket.connect",
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
    "socket.sendto",
    "socket.sendmsg",
)
_guard = {"on": False}
_attempts: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _guard["on"] and event in _BLOCKED:
        _attempts.append(f"{event} {args!r}"[:300])
        raise OSError(f"network touched at import: {event} {args!r}"[:300])


def _guarded_import(names: tuple[str, ...]) -> None:
    import importlib

    _guard["on"] = True
    try:
        for name in names:
            importlib.import_module(name)
    finally:
        _guard["on"] = False


def main(argv: list[str]) -> dict[str, Any]:
    mode = argv[0]
    out: dict[str, Any] = {"mode": mode}
    sys.addaudithook(_audit)
    try:
        if mode == "bare":
            _guarded_import(("fastapi", "mangum", "boto3", "aws_lambda_powertools"))
            out["imported"] = time.monotonic()
            return out
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")
        _guarded_import(("handler",))
        out["imported"] = time.monotonic()
        handler = sys.modules["handler"]
        with open(argv[1], encoding="utf-8") as handle:
            event = json.load(handle)
        from rollout_sdk.local.invoke import invoke

        if mode == "api":
            call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
            out["first_202"] = time.monotonic()
            out["status"] = call.result.get("statusCode")
            out["dispatched"] = call.dispatched
            return out
        writes: list[tuple[float, str]] = []

        def after_call(event_name: str, **_: Any) -> None:
            operation = event_name.rsplit(".", 1)[-1]
            if operation in ("UpdateItem", "PutItem", "TransactWriteItems"):
                writes.append((time.monotonic(), operation))

        dynamodb = handler.runtime.clients.dynamodb
        dynamodb.meta.events.register("after-call.dynamodb.*", after_call)
        ran = invoke(handler, "WorkerFunction", event, timeout_seconds=900)
        out["done"] = time.monotonic()
        out["result"] = ran.result
        if writes:
            out["claimed"], out["claim_operation"] = writes[0]
        return out
    except Exception as exc:  # reported to the parent, which records the failure
        out["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        return out
    finally:
        out["network_attempts"] = list(_attempts)


if __name__ == "__main__":
    result = main(sys.argv[1:])
    print("BENCH-RESULT " + json.dumps(result, default=str), flush=True)  # bench.common.RESULT_MARK
    sys.exit(1 if "error" in result else 0)
