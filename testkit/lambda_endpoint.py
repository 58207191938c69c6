"""The durable worker as Lambda runs it, on 127.0.0.1: the durable execution testing SDK's web
runner (the checkpoint service, which drives each execution by calling Lambda's Invoke API) and a
Lambda Invoke endpoint whose every Invoke is one invocation of ``handler.durable_worker`` in a
fresh process (:mod:`testkit.durable_process`), so that a test can SIGKILL an invocation mid-turn
as Lambda loses an execution environment (the in-process runner's timeout leaves the handler's
thread running instead).

    with DurableLambda(env) as durable:  # the runner and the endpoint, each pointed at the other
        arn = durable.runner.start_execution("name", payload)
        durable.endpoint.running()[0].kill()  # an invocation lost mid-turn; the runner retries
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollout_sdk.local.emulator import LOCAL_REGION
from rollout_sdk.testing.lifecycle import StartStop
from rollout_sdk.testing.threads import ServerThread, free_port
from testkit import REPO_ROOT
from testkit.aws import fake_aws_env
from testkit.durable_process import CHECKPOINT_ENDPOINT_VARIABLE

#: The path of Lambda's Invoke API (boto3's ``lambda.invoke``).
INVOKE_PATH = "/2015-03-31/functions/{function:str}/invocations"


@dataclass
class Invocation:
    """One Invoke the endpoint ran: its process, and how it ended."""

    number: int
    function: str
    process: subprocess.Popen[bytes]
    folder: Path
    log: IO[bytes] = field(repr=False)
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    #: SIGKILLed while running: by a test, or (``timed_out`` too) at the endpoint's timeout.
    killed: bool = False
    timed_out: bool = False
    #: The handler's answer (None until it ended, or when it died).
    result: Any = None
    _output: str | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        """SIGKILL: the execution environment dies mid-invocation."""
        if self.process.poll() is None:
            self.killed = True
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    @property
    def output(self) -> str:
        """What the process printed (its log lines): kept once the endpoint stopped."""
        if self._output is not None:
            return self._output
        self.log.flush()
        return (self.folder / "log.txt").read_text(encoding="utf-8", errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        return self.output[-chars:]

    def close(self) -> None:
        """Killed if still running, its log closed and kept (the folder is about to go)."""
        if self._output is None:
            self.kill()
            text = self.output
            self.log.close()
            self._output = text


class DurableLambdaEndpoint(StartStop):
    """Lambda's Invoke API on a free loopback port: each Invoke runs one invocation of
    ``handler.durable_worker`` in a fresh process with ``env`` (made fake-AWS, the outer
    settings dropped) and answers its result, or a function error (``X-Amz-Function-Error:
    Unhandled``) when the process died, failed, or outlasted ``timeout_seconds``.
    ``checkpoint_endpoint`` is the durable execution service the invocations checkpoint to."""

    def __init__(
        self,
        env: Mapping[str, str],
        checkpoint_endpoint: str,
        *,
        timeout_seconds: float = 60.0,
        port: int | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.env = fake_aws_env(
            {
                **env,
                CHECKPOINT_ENDPOINT_VARIABLE: checkpoint_endpoint,
                "TESTKIT_DURABLE_TIMEOUT_SECONDS": f"{timeout_seconds:g}",
                "PYTHONUNBUFFERED": "1",
            },
            clean=True,
        )
        self._dir = tempfile.TemporaryDirectory(prefix="rollout-sdk-durable-")
        self._lock = threading.Lock()
        self._invocations: list[Invocation] = []
        self._closing = False
        app = Starlette(routes=[Route(INVOKE_PATH, self._handle, methods=["POST"])])
        self._server = ServerThread(app, port=port or free_port())

    @property
    def url(self) -> str:
        return self._server.url

    # ------------------------------------------------------------------ what a test reads

    @property
    def invocations(self) -> list[Invocation]:
        """Every invocation so far, in the order they arrived."""
        with self._lock:
            return list(self._invocations)

    def running(self) -> list[Invocation]:
        """The invocations whose process is still running."""
        return [invocation for invocation in self.invocations if invocation.running]

    def kill_all(self) -> None:
        """SIGKILL every invocation still running (and start no new one)."""
        with self._lock:
            self._closing = True
        for invocation in self.running():
            invocation.kill()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        self._server.start()
        return self

    def stop(self) -> None:
        self.kill_all()
        self._server.stop()
        for invocation in self.invocations:
            invocation.close()
        self._dir.cleanup()

    # ------------------------------------------------------------------ the Invoke API

    async def _handle(self, request: Request) -> Response:
        status, payload, headers = await self._invoke(
            request.path_params["function"], await request.body()
        )
        return JSONResponse(payload, status, headers=headers)

    async def _invoke(self, function: str, payload: bytes) -> tuple[int, Any, dict[str, str]]:
        invocation = self._spawn(function, payload)
        if invocation is None:
            return 503, {"message": "the endpoint is stopping"}, {}
        headers = {"X-Amz-Executed-Version": "$LATEST", "x-amzn-RequestId": invocation.request_id}
        try:
            await asyncio.to_thread(invocation.process.wait, self.timeout_seconds)
        except subprocess.TimeoutExpired:
            invocation.timed_out = True
            await asyncio.to_thread(invocation.kill)
            return _function_error(
                headers,
                f"Task timed out after {self.timeout_seconds:.2f} seconds",
                "Sandbox.Timedout",
            )
        out = invocation.folder / "result.json"
        code = invocation.process.returncode
        if code != 0 or not out.exists():
            if code is not None and code < 0:  # as Lambda words it: "signal: killed"
                reason = f"signal: {(signal.strsignal(-code) or str(-code)).lower()}"
            else:
                reason = f"exit status {code}"
            return _function_error(
                headers,
                f"RequestId: {invocation.request_id} Error: Runtime exited with error: {reason}",
                "Runtime.ExitError",
                invocation.log_tail(),
            )
        invocation.result = json.loads(out.read_text(encoding="utf-8"))
        return 200, invocation.result, headers

    def _spawn(self, function: str, payload: bytes) -> Invocation | None:
        with self._lock:
            if self._closing:
                return None
            number = len(self._invocations)
            folder = Path(self._dir.name) / f"invocation-{number}"
            folder.mkdir()
            (folder / "event.json").write_bytes(payload)
            log = (folder / "log.txt").open("wb")
            process = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
                [
                    sys.executable,
                    "-m",
                    "testkit.durable_process",
                    str(folder / "event.json"),
                    str(folder / "result.json"),
                ],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            invocation = Invocation(number, function, process, folder, log)
            self._invocations.append(invocation)
            return invocation


def _function_error(
    headers: dict[str, str], message: str, kind: str, log: str | None = None
) -> tuple[int, Any, dict[str, str]]:
    """Lambda's answer to an Invoke whose function failed: 200, the error, and the header
    (with, beside Lambda's two fields, the process's last lines: the runner logs the answer)."""
    error: dict[str, Any] = {"errorMessage": message, "errorType": kind}
    if log is not None:
        error["log"] = log
    return 200, error, {**headers, "X-Amz-Function-Error": "Unhandled"}


class DurableWebRunner(StartStop):
    """The testing SDK's ``WebRunner`` on a free loopback port, serving from a thread: the
    durable execution service (start, checkpoint, state, history) whose executor invokes each
    execution's handler at ``lambda_endpoint`` and invokes it again after a failed invocation.
    Durable waits are skipped (``skip_time``); ``invocation_timeout_seconds`` bounds each."""

    def __init__(
        self,
        lambda_endpoint: str,
        *,
        invocation_timeout_seconds: int = 60,
        port: int | None = None,
    ) -> None:
        from aws_durable_execution_sdk_python_testing.runner import WebRunner, WebRunnerConfig
        from aws_durable_execution_sdk_python_testing.web.server import WebServiceConfig

        self.port = port or free_port()
        self.runner = WebRunner(
            WebRunnerConfig(
                # Its constructor calls logging.basicConfig with this level.
                web_service=WebServiceConfig(
                    host="127.0.0.1", port=self.port, log_level=logging.WARNING
                ),
                lambda_endpoint=lambda_endpoint,
                local_runner_region=LOCAL_REGION,
                skip_time=True,
                invocation_timeout_seconds=invocation_timeout_seconds,
            )
        )
        self._thread: threading.Thread | None = None
        self._client: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> Self:
        import boto3

        self.runner.start()
        self._thread = threading.Thread(
            target=self.runner.serve_forever, name=f"durable-web-runner:{self.port}", daemon=True
        )
        self._thread.start()
        self._client = boto3.client("lambda", endpoint_url=self.url, region_name=LOCAL_REGION)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:  # bounded: the deadline below
                try:
                    client.get(self.url + "/health")
                    return self
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise RuntimeError(f"the web runner on {self.url} did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        # The SDK gives no other way to either (1.4.0): WebRunner.stop closes its server's
        # socket but never ends serve_forever, and stops its scheduler's event loop but never
        # closes it (which would leave the loop and its sockets to the garbage collector).
        server = self.runner._server  # noqa: SLF001
        scheduler = self.runner._scheduler  # noqa: SLF001
        if server is not None and self._thread is not None:
            server.shutdown()  # ends serve_forever
            self._thread.join(20)
            self._thread = None
        self.runner.stop()
        if scheduler is not None:
            scheduler._loop.close()  # noqa: SLF001
        if self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------------ the service's API

    def start_execution(
        self,
        name: str,
        payload: Mapping[str, Any],
        *,
        function: str = "DurableWorkerFunction",
        timeout_seconds: int = 300,
    ) -> str:
        """Start an execution of ``function`` named ``name`` with ``payload``; its ARN."""
        body = {
            "AccountId": "123456789012",
            "FunctionName": function,
            "FunctionQualifier": "$LATEST",
            "ExecutionName": name,
            "ExecutionTimeoutSeconds": timeout_seconds,
            "ExecutionRetentionPeriodDays": 1,
            "Input": json.dumps(payload),
        }
        response = httpx.post(self.url + "/start-durable-execution", json=body, timeout=10.0)
        response.raise_for_status()
        return str(response.json()["ExecutionArn"])

    def execution(self, arn: str) -> dict[str, Any]:
        """GetDurableExecution's answer (``Status``, ``Result``, ``Error``, ...)."""
        answer: dict[str, Any] = self._client.get_durable_execution(DurableExecutionArn=arn)
        return answer

    def history(self, arn: str) -> list[dict[str, Any]]:
        """The execution's events (GetDurableExecutionHistory, every page, with their data)."""
        events: list[dict[str, Any]] = []
        params: dict[str, Any] = {"DurableExecutionArn": arn, "IncludeExecutionData": True}
        while True:  # bounded: the service's pages
            page = self._client.get_durable_execution_history(**params)
            events.extend(page.get("Events", []))
            if not page.get("NextMarker"):
                return events
            params["Marker"] = page["NextMarker"]


class DurableLambda(StartStop):
    """The two together, each pointed at the other: the web runner (``runner``) and the Invoke
    endpoint (``endpoint``) whose processes run handler.py's durable worker with ``env``.
    Stopped in the order that leaves nothing waiting: the invocations killed, the runner
    stopped, then the endpoint."""

    def __init__(self, env: Mapping[str, str], *, invocation_timeout_seconds: int = 60) -> None:
        runner_port = free_port()
        self.endpoint = DurableLambdaEndpoint(
            env,
            f"http://127.0.0.1:{runner_port}",
            timeout_seconds=invocation_timeout_seconds,
        )
        self.runner = DurableWebRunner(
            self.endpoint.url,
            invocation_timeout_seconds=invocation_timeout_seconds,
            port=runner_port,
        )

    def start(self) -> Self:
        self.endpoint.start()
        try:
            self.runner.start()
        except BaseException:
            self.endpoint.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.endpoint.kill_all()
            self.runner.stop()
        finally:
            self.endpoint.stop()
