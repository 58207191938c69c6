"""One cold start, in a fresh process started by :mod:`bench.aws` (never run it by hand).

    python3.13 -S -P bench/coldchild.py bare|api|worker [EVENT_FILE]

It runs with the Lambda artifact and the runtime's boto3 alone on ``PYTHONPATH`` (no site, not
this repository), so only the standard library is imported here before the timed part, and
nothing of the kit's local tooling after it. ``bare`` imports fastapi, mangum, boto3 and
aws_lambda_powertools; ``api`` imports ``handler.py`` and sends the init event through
``handler.api``; ``worker`` imports it and runs the worker event through ``handler.worker``
(the first chat call is stamped by the stand-in, in the parent, when it arrives). The imports
run under a network guard: an audit hook that fails any connect or name lookup. Prints one
``BENCH-RESULT`` line of JSON with ``time.monotonic()`` stamps (the clock is shared by every
process of the machine), and how many modules the process compiled from source.
"""

from __future__ import annotations

import importlib.machinery
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
_compiled: list[str] = []
# get_code calls source_to_code only when no valid .pyc exists: each call is a module compiled
# from source (what the bytecode modes are about).
_source_to_code = importlib.machinery.SourceFileLoader.source_to_code


def _counted(self: Any, data: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
    _compiled.append(str(path))
    return _source_to_code(self, data, path, *args, **kwargs)


class _Context:
    """The parts of a Lambda context the handlers read."""

    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    log_group_name = "/aws/lambda/bench"
    log_stream_name = "bench"

    def __init__(self, function_name: str, timeout_seconds: float) -> None:
        self.function_name = function_name
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        )
        self.aws_request_id = f"bench-{time.monotonic_ns()}"
        self._ends = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - time.monotonic()) * 1000))


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


def _api(handler: Any, event: Any, out: dict[str, Any]) -> None:
    """The init event through ``handler.api``; the worker events it handed off, captured from
    the Lambda client's Invoke calls."""
    dispatched: list[Any] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        body = params.get("body") or b"{}"
        dispatched.append(json.loads(body if isinstance(body, bytes | str) else body.read()))

    handler.runtime.clients.lambda_.meta.events.register("before-call.lambda.Invoke", capture)
    result = handler.api(event, _Context("ApiFunction", 29))
    out["first_202"] = time.monotonic()
    out["status"] = result.get("statusCode")
    out["dispatched"] = dispatched


def _worker(handler: Any, event: Any, out: dict[str, Any]) -> None:
    """The worker event through ``handler.worker``; its first DynamoDB write is the claim."""
    writes: list[tuple[float, str]] = []

    def after_call(event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        if operation in ("UpdateItem", "PutItem", "TransactWriteItems"):
            writes.append((time.monotonic(), operation))

    handler.runtime.clients.dynamodb.meta.events.register("after-call.dynamodb.*", after_call)
    out["result"] = handler.worker(event, _Context("WorkerFunction", 900))
    out["done"] = time.monotonic()
    if writes:
        out["claimed"], out["claim_operation"] = writes[0]


def _botocore_data(handler: Any) -> dict[str, Any]:
    """Whether the kit's clients read the layer's botocore data: only under the botocore it was
    built from (a runtime with another reads botocore's whole data, a slower cold start that a
    figure must not take for the kit's)."""
    import contextlib  # here, after the figures' end: nothing more before the timed part

    import botocore

    from rollout_sdk.aws.clients import BOTOCORE_VERSION_FILE, usable_botocore_data

    folder = handler.runtime.clients.botocore_data
    built_from = None
    if folder is not None:
        with contextlib.suppress(OSError):  # no version file: not used, and said so
            built_from = (folder / BOTOCORE_VERSION_FILE).read_text(encoding="utf-8").strip()
    return {
        "folder": None if folder is None else str(folder),
        "built_from": built_from,
        "runtime_botocore": botocore.__version__,
        "used": usable_botocore_data(folder) is not None,
    }


def main(argv: list[str]) -> dict[str, Any]:
    mode = argv[0]
    out: dict[str, Any] = {"mode": mode}
    importlib.machinery.SourceFileLoader.source_to_code = _counted  # type: ignore[method-assign]
    sys.addaudithook(_audit)
    try:
        if mode == "bare":
            _guarded_import(("fastapi", "mangum", "boto3", "aws_lambda_powertools"))
            out["imported"] = time.monotonic()
            return out
        _guarded_import(("handler",))
        out["imported"] = time.monotonic()
        with open(argv[1], encoding="utf-8") as handle:
            event = json.load(handle)
        handler = sys.modules["handler"]
        (_api if mode == "api" else _worker)(handler, event, out)
        out["botocore_data"] = _botocore_data(handler)
        return out
    except Exception as exc:  # reported to the parent, which records the failure
        out["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        return out
    finally:
        out["network_attempts"] = list(_attempts)
        out["compiled_from_source"] = len(_compiled)
        out["modules_loaded"] = len(sys.modules)


if __name__ == "__main__":
    result = main(sys.argv[1:])
    print("BENCH-RESULT " + json.dumps(result, default=str), flush=True)  # bench.common.RESULT_MARK
    sys.exit(1 if "error" in result else 0)
