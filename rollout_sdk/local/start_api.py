"""``rollout-sdk start-api``: the template's API function served over HTTP on 127.0.0.1, as
``sam local start-api`` serves it, without Docker.

Each request becomes the API Gateway HTTP API (payload 2.0) event ``handler.py`` receives on
Lambda, and the function's answer becomes the HTTP answer. Around it, the stack as ``rollout-sdk
invoke`` builds it: the table, the secret, the key and the bucket on an AWS emulator (an
embedded moto server, or ``--endpoint``), the function's environment resolved from the template.
The API function runs in this process, one invocation at a time, as one Lambda instance runs
them; each worker event it hands off (its asynchronous ``Invoke``) runs as its own cold start:
``rollout-sdk invoke WorkerFunction`` in a process of its own, as Lambda runs the worker
function in an instance of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

#: API Gateway's HTTP API cuts every integration at 30 seconds.
INTEGRATION_TIMEOUT_SECONDS = 30.0
#: Bodies API Gateway passes as text; any other is base64 (as binary media types are).
_TEXT_TYPES = ("application/json", "text/", "application/x-www-form-urlencoded")


def http_api_event(scope: Scope, body: bytes) -> dict[str, Any]:
    """The payload 2.0 event API Gateway's HTTP API makes of one request."""
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    query = scope.get("query_string", b"").decode("latin-1")
    params: dict[str, str] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        params[key] = f"{params[key]},{value}" if key in params else value
    text = headers.get("content-type", "").startswith(_TEXT_TYPES) or not body
    now = time.time()
    client = scope.get("client") or ("127.0.0.1", 0)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": scope["path"],
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": headers.get("host", "127.0.0.1"),
            "domainPrefix": "local",
            "http": {
                "method": scope["method"],
                "path": scope["path"],
                "protocol": f"HTTP/{scope.get('http_version', '1.1')}",
                "sourceIp": client[0],
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": not text,
        "body": body.decode("utf-8", "replace") if text else base64.b64encode(body).decode(),
    }
    if cookies:
        event["cookies"] = cookies
    if params:
        event["queryStringParameters"] = params
    return event


@dataclass
class LocalApi:
    """The API function behind a local HTTP server; worker events run as their own processes."""

    handler: Any
    template: str
    endpoint: str
    agent: str | None = None
    allowed_server_hosts: str | None = None
    #: The worker processes started, so that a caller can wait for them (and tests do).
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke_api(self, event: dict[str, Any]) -> Any:
        """One invocation of the API function (one at a time, as in one instance)."""
        from rollout_sdk.local.invoke import invoke

        with self._lock:
            call = invoke(
                self.handler, "ApiFunction", event, timeout_seconds=INTEGRATION_TIMEOUT_SECONDS
            )
        for worker_event in call.dispatched:
            self.start_worker(worker_event)
        return call.result

    def start_worker(self, event: dict[str, Any]) -> subprocess.Popen[bytes]:
        """The worker function's invocation on ``event``, as a cold start of its own."""
        fd, path = tempfile.mkstemp(prefix="rollout-sdk-worker-", suffix=".json")
        with os.fdopen(fd, "w") as file:  # 0600: the event carries the callback key
            json.dump(event, file)
        command = [
            sys.executable,
            "-m",
            "rollout_sdk",
            "invoke",
            "WorkerFunction",
            path,
            "--template",
            self.template,
            "--endpoint",
            self.endpoint,
        ]
        if self.agent:
            command += ["--agent", self.agent]
        if self.allowed_server_hosts:
            command += ["--allowed-server-hosts", self.allowed_server_hosts]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)  # noqa: S603 - the kit's own CLI
        self.workers.append(process)
        threading.Thread(target=_remove_after, args=(process, path), daemon=True).start()
        return process

    def close(self, within: float = 10.0) -> None:
        """Stop the worker processes still running (their emulator may stop with this)."""
        for process in self.workers:
            if process.poll() is None:
                process.terminate()
        for process in self.workers:
            try:
                process.wait(within)
            except subprocess.TimeoutExpired:
                process.kill()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        result = await asyncio.to_thread(self.invoke_api, http_api_event(scope, body))
        await _answer(send, result)


def _remove_after(process: subprocess.Popen[bytes], path: str) -> None:
    process.wait()
    Path(path).unlink(missing_ok=True)


async def _answer(send: Send, result: Any) -> None:
    """Send the function's answer as API Gateway does (payload 2.0)."""
    if not isinstance(result, dict) or "statusCode" not in result:
        # A bare value: API Gateway answers 200 with it as JSON.
        result = {"statusCode": 200, "body": json.dumps(result), "headers": {}}
    body = result.get("body") or ""
    data = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    headers = [
        (str(k).lower().encode("latin-1"), str(v).encode("latin-1"))
        for k, v in (result.get("headers") or {}).items()
    ]
    headers += [(b"set-cookie", str(c).encode("latin-1")) for c in result.get("cookies") or []]
    if not any(k == b"content-length" for k, _ in headers):
        headers.append((b"content-length", str(len(data)).encode()))
    await send(
        {"type": "http.response.start", "status": int(result["statusCode"]), "headers": headers}
    )
    await send({"type": "http.response.body", "body": data})
