"""``rollout-sdk start-api``: the template's API function served over HTTP on 127.0.0.1, as
``sam local start-api`` serves it, without Docker, and the functions around it as Lambda runs
them.

Each request becomes the API Gateway HTTP API (payload 2.0) event ``handler.py`` receives on
Lambda, and the function's answer becomes the HTTP answer. Each function runs as Lambda scales
it: an invocation goes to an idle instance, or to a new one (a process of its own that imported
``handler.py``: a cold start, :mod:`rollout_sdk.local.instance`) while fewer than the limit
run, else it is throttled, which API Gateway answers 500, as at Lambda's concurrency limit.
So result polls that wait (osmosis-ai 0.3.8's) hold an instance each, as on Lambda. Each worker
event the API function (or the re-drive) hands off is an asynchronous invocation: tried again
on a function error (at once: Lambda waits a minute, then two) as the template's
``MaximumRetryAttempts`` says, then sent to the failure destination. The re-drive runs on its
schedule. Around them, the stack as ``rollout-sdk invoke`` builds it: the table, the secret, the
key and the bucket on an AWS emulator (an embedded moto server, or ``--endpoint``), each
function's environment resolved from the template.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import InstanceThrottled

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from rollout_sdk.local.emulator import LocalResources

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


#: What API Gateway answers when it cannot get an answer from the function: the function failed
#: (or its instance did) or it was throttled at its concurrency limit (both 500), or it ran
#: past the integration's 30 seconds (503).
FUNCTION_FAILED = {"statusCode": 500, "body": '{"message":"Internal Server Error"}'}
THROTTLED = FUNCTION_FAILED
TIMED_OUT = {"statusCode": 503, "body": '{"message":"Service Unavailable"}'}
#: The route API Gateway sends to the poll function (template.yaml's PollFunction event).
POLL_ROUTE = re.compile(r"^/rollout/[^/]+/result$")
#: How many instances of one function run at once by default (Lambda's account limit is
#: 1,000; each instance here is a process).
DEFAULT_MAX_INSTANCES = 16
#: How long a throttled asynchronous invocation waits before it is tried again.
THROTTLED_RETRY_SECONDS = 1.0
#: What a worker's failure record says when its instance died (Lambda's word for a runtime that
#: exited during an invocation).
EXITED = {"errorType": "Runtime.ExitError", "errorMessage": "the function's instance exited"}


class Instance:
    """One emulated instance of a function: a process of its own that imported handler.py
    once (its cold start) and runs one invocation at a time (:mod:`rollout_sdk.local.instance`)."""

    def __init__(self, logical_id: str, env: dict[str, str], timeout: float) -> None:
        command = [sys.executable, "-m", "rollout_sdk.local.instance", logical_id, f"{timeout:g}"]
        self.process = subprocess.Popen(  # noqa: S603 - the kit's own module
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def call(self, event: Any, within: float) -> dict[str, Any] | None:
        """The invocation's answer (``result``, ``dispatched``), or None when the instance died
        (a function error: its traceback is on this command's stderr); TimeoutError past
        ``within`` seconds (the instance is stopped, as Lambda ends a timed-out environment)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(event).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:
            return None
        ready, _, _ = select.select([self.process.stdout], [], [], within)
        if not ready:
            self.stop()
            raise TimeoutError(f"the function ran past {within:g} s")
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            return None
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self, within: float = 10.0) -> None:
        if self.alive:
            self.process.terminate()
            try:
                self.process.wait(within)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(within)


@dataclass
class LocalFunction:
    """One function of the template as Lambda scales it: each invocation on an idle instance,
    or on a new one (a cold start) while fewer than ``max_instances`` run."""

    logical_id: str
    env: dict[str, str]
    timeout: float
    max_instances: int = DEFAULT_MAX_INSTANCES
    instances: list[Instance] = field(default_factory=list)
    _idle: list[Instance] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: bool = False

    def _take(self) -> Instance:
        with self._lock:
            if self._stopped:
                raise InstanceThrottled(f"{self.logical_id} is stopping")
            while self._idle:
                instance = self._idle.pop()
                if instance.alive:
                    return instance
            self.instances = [i for i in self.instances if i.alive]
            if len(self.instances) >= self.max_instances:
                raise InstanceThrottled(self.logical_id)
            instance = Instance(self.logical_id, self.env, self.timeout)
            self.instances.append(instance)
            return instance

    def invoke(self, event: Any, within: float | None = None) -> dict[str, Any] | None:
        """One invocation: its answer, or None for a function error. Raises InstanceThrottled, and
        TimeoutError past ``within`` (default: the function's timeout, and a second)."""
        instance = self._take()
        answer = instance.call(event, self.timeout + 1 if within is None else within)
        if answer is not None:
            with self._lock:
                self._idle.append(instance)
        return answer

    def stop(self) -> None:
        """Stop every instance; none starts after this."""
        with self._lock:
            self._stopped = True
            instances = list(self.instances)
        for instance in instances:
            instance.stop()


@dataclass
class LocalApi:
    """The template's API function behind a local HTTP server, and the functions around it as
    Lambda runs them: each worker event the API function (or the re-drive) hands off is an
    asynchronous invocation of the worker function, retried as ``retries`` says on a function
    error and then sent to ``on_failure`` (the worker's failure destination); the re-drive runs
    every ``redrive_every`` seconds when given (its schedule)."""

    api: LocalFunction
    worker: LocalFunction
    #: The poll function (a deploy with a Workflow), API Gateway's route of 0.3.8's result
    #: polls; without it, they go to the API function, as API Gateway's $default route has it.
    poll: LocalFunction | None = None
    on_failure: LocalFunction | None = None
    redrive: LocalFunction | None = None
    #: The worker's MaximumRetryAttempts (template.yaml's EventInvokeConfig).
    retries: int = 2
    redrive_every: float | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _executor: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        requests = self.api.max_instances + (self.poll.max_instances if self.poll else 0)
        self._executor = ThreadPoolExecutor(requests, thread_name_prefix="rollout-sdk-request")

    def invoke_api(self, event: dict[str, Any]) -> Any:
        """One invocation of the function API Gateway routes the request to (the poll function
        for a result poll, when deployed; else the API function), answered as API Gateway
        answers it."""
        function = self.api
        http = event["requestContext"]["http"]
        if self.poll is not None and http["method"] == "GET" and POLL_ROUTE.match(http["path"]):
            function = self.poll
        try:
            answer = function.invoke(event, INTEGRATION_TIMEOUT_SECONDS)
        except InstanceThrottled:
            return THROTTLED
        except TimeoutError:
            return TIMED_OUT
        if answer is None:
            return FUNCTION_FAILED
        self._hand_off(answer)
        return answer["result"]

    def _hand_off(self, answer: dict[str, Any]) -> None:
        for worker_event in answer.get("dispatched", []):
            self.start_worker(worker_event)

    def start_worker(self, event: dict[str, Any]) -> threading.Thread:
        """The worker function's asynchronous invocation on ``event``."""
        thread = threading.Thread(target=self._run_async, args=(event,), daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def _run_async(self, event: dict[str, Any]) -> None:
        """As Lambda runs an asynchronous invocation: a throttled one waits and is tried again
        (Lambda keeps it for up to its maximum event age, not counting it as a retry); after a
        function error it is tried again at most ``retries`` times, then the failure
        destination gets the record."""
        error: dict[str, Any] = EXITED
        attempts = 0
        while attempts <= self.retries and not self._stopping.is_set():
            try:
                answer = self.worker.invoke(event)
            except InstanceThrottled:
                self._stopping.wait(THROTTLED_RETRY_SECONDS)
                continue
            except TimeoutError:
                error = {
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"Task timed out after {self.worker.timeout:g} seconds",
                }
                attempts += 1
                continue
            if answer is not None:
                return
            attempts += 1
        if self.on_failure is not None and not self._stopping.is_set():
            _logged(self.on_failure, failure_record(event, error, attempts))

    def run_schedule(self) -> None:
        """The re-drive on its schedule, until :meth:`close`."""
        if self.redrive is None or not self.redrive_every:
            return
        while not self._stopping.wait(self.redrive_every):
            answer = _logged(self.redrive, {})
            if answer is not None:
                self._hand_off(answer)

    def start(self) -> None:
        """Start the schedule's thread."""
        if self.redrive is not None and self.redrive_every:
            thread = threading.Thread(target=self.run_schedule, daemon=True)
            self._threads.append(thread)
            thread.start()

    def close(self) -> None:
        """Stop every instance (their emulator may stop with this command)."""
        self._stopping.set()
        for function in (self.api, self.poll, self.worker, self.on_failure, self.redrive):
            if function is not None:
                function.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

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
        # A thread per request in flight, as many as the instances that may answer them (the
        # default executor's few would queue requests that Lambda would run at once).
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(
            self._executor, self.invoke_api, http_api_event(scope, body)
        )
        await _answer(send, result)


def local_stack(
    template: dict[str, Any],
    resources: LocalResources,
    overrides: dict[str, str],
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    redrive_every: float | None = None,
    env_vars: dict[str, dict[str, str]] | None = None,
) -> LocalApi:
    """The template's API, worker, failure-destination and re-drive functions on ``resources``,
    as deployed with ``overrides`` (each instance's environment: this process's, then the
    function's, then ``env_vars``' ``Parameters`` and its own, as sam local's --env-vars).
    ConfigurationError for a parameter the template does not have."""
    from rollout_sdk.local.invoke import ENTRY_POINTS, function_environment, function_timeout

    def function(logical_id: str) -> LocalFunction:
        env = {**os.environ, **function_environment(template, logical_id, resources, overrides)}
        # As Lambda sets it: handler.py imports its entry point's module at the cold start, and
        # the HTTP functions know they never run the workflow.
        env["_HANDLER"] = f"handler.{ENTRY_POINTS[logical_id]}"
        env.update((env_vars or {}).get("Parameters", {}))
        env.update((env_vars or {}).get(logical_id, {}))
        timeout = function_timeout(template, logical_id)
        return LocalFunction(logical_id, env, timeout, max_instances=max_instances)

    resources_ = template["Resources"]
    # The poll function exists where its condition (ServesWorkflow: a Workflow) holds.
    polls = "PollFunction" in resources_ and bool(
        overrides.get("Workflow", template.get("Parameters", {}).get("Workflow", {}).get("Default"))
    )
    worker = resources_["WorkerFunction"]["Properties"]
    retries = int(worker.get("EventInvokeConfig", {}).get("MaximumRetryAttempts", 2))
    if redrive_every is None:
        spec = template.get("Parameters", {}).get("RedriveIntervalMinutes", {})
        redrive_every = 60.0 * float(
            overrides.get("RedriveIntervalMinutes", spec.get("Default", 1))
        )
    return LocalApi(
        api=function("ApiFunction"),
        worker=function("WorkerFunction"),
        poll=function("PollFunction") if polls else None,
        on_failure=function("WorkerFailureFunction"),
        redrive=function("RedriveFunction"),
        retries=retries,
        redrive_every=redrive_every or None,
    )


def _logged(function: LocalFunction, event: Any) -> dict[str, Any] | None:
    """An invocation made by a thread of this command (a failure destination's, a scheduled
    one): its answer, or None after saying on stderr why there is none (the thread goes on)."""
    try:
        answer = function.invoke(event)
    except (InstanceThrottled, TimeoutError) as exc:
        print(f"rollout-sdk: {function.logical_id} not invoked: {exc!r}", file=sys.stderr)
        return None
    if answer is None:
        print(f"rollout-sdk: {function.logical_id} failed (see its log above)", file=sys.stderr)
    return answer


def failure_record(event: dict[str, Any], error: dict[str, Any], attempts: int) -> dict[str, Any]:
    """What Lambda sends an asynchronous invocation's OnFailure destination once its retries
    are spent (the shape of events/worker-failure.json)."""
    return {
        "version": "1.0",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:WorkerFunction:live",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "1",
            "functionError": "Unhandled",
        },
        "responsePayload": error,
    }


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
