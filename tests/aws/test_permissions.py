"""Least privilege, checked call by call (issue 11, item 1).

Every function's handler runs, through handler.py against moto's server, on every code path:
the happy path, an agent error, a kit failure, a failed hand-off and its release, large
payloads through S3, status and cancel, the server-key secret (created and given), the failure
destination, a queue batch, dead letters and the re-drive, in both HandOff modes and with
DurableWorker=true (its rollouts run on DurableWorkerFunction, through the durable execution
testing SDK's runner), and the upgrade's backfill of the due index in a deploy with
BackfillDueIndex=true. Every boto3
client made while they run records each AWS call (:class:`~tests.aws.permissions.Recorder`);
each call is mapped to the IAM actions AWS checks and their resource ARNs
(:data:`~tests.aws.permissions.OPERATIONS`) and judged against that function's role in
template.yaml as the SAM translator of the deployment tools' own venv (.venv-sam) expands it,
under the scenario's parameter values. What the Lambda service itself does with a role (logs,
network interfaces, destinations, queue polling, a durable function's checkpoints) is an allowlist
(:meth:`~tests.aws.permissions.Stack.service_needs`), checked as granted and never trimmed.

The tests: every call is allowed; the service's needs are granted; no statement grants an action
no call or service need uses (printed, then asserted); and removing any one statement of the
template makes the check fail (translated again without it, every statement in turn).
Issue 20: no role may scan the table unless BackfillDueIndex=true, and then only the re-drive's;
the backfill runs on moto under IAM's answer as the recorder enforces it (refused, naming the
parameter, without the grant); the payload bucket's policy refuses every request not over TLS.
Issue 25: the durable worker's role, as SAM translates it with DurableWorker=true, grants its
checkpoints (the managed policy), and the hand-offs name its alias.
Run with ``-s`` to see the tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from aws_durable_execution_sdk_python.lambda_service import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from botocore.exceptions import ClientError

from rollout_sdk.dispatch.aws_lambda import execution_name
from rollout_sdk.dispatch.sealed import SEALED_KEY_FIELD
from rollout_sdk.local.emulator import LocalResources, load_template, local_client, provision
from rollout_sdk.local.invoke import (
    Invocation,
    function_environment,
    import_handler,
    invoke,
    load_event,
)
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.settings import VARIABLE_PREFIXES, reset_settings
from rollout_sdk.store.dynamodb import DUE_PARTITION, DUE_SORT, ROLLOUT_PREFIX
from rollout_sdk.store.record import expiry
from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE, Fault, TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.aws import fake_aws_env
from testkit.records import park_due_now

from . import permissions
from .conftest import CALLBACK_KEY, ROOT, SERVER_KEY
from .permissions import (
    ALIAS,
    DURABLE_EXECUTION_ACTIONS,
    Call,
    Need,
    Recorder,
    Stack,
    Verdict,
    action_matches,
    denied_by,
    function_arn,
    identifiers,
    key_arn,
    needs_of,
    queue_arn,
    resource_label,
    resource_matches,
    stack_named_by_ids,
    table_arn,
)
from .test_queue_handoff import batch, receive, unsettled

pytestmark = pytest.mark.timeout(180)

EVENTS = ROOT / "events"
SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
TIMEOUTS = {
    "ApiFunction": 29,
    "PollFunction": 29,
    "WorkerFunction": 900,
    "WorkerFailureFunction": 300,
    "RedriveFunction": 600,
    "QueueWorkerFunction": 900,
    "DeadLetterFunction": 300,
    "DurableWorkerFunction": 900,  # each invocation (WorkerTimeout at most)
}
DURABLE = {"HandOff": "direct", "DurableWorker": "true"}
DURABLE_POLICY = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicDurableExecutionRolePolicy"
BASIC_POLICY = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
NO_KEY = object()  # an init body without api_key
BACKFILL = {"backfill_due_index": True}
#: A deploy that serves an osmosis-ai 0.3.8 workflow beside the agent loop.
WORKFLOW = {
    "HandOff": "direct",
    "Workflow": "tests.osmosis03.workflows:Scripted",
    "Grader": "tests.osmosis03.workflows:ScriptedGrader",
}
LEASE_HEADER = "X-Osmosis-Rollout-Lease"  # the re-drive's one-off invocation after an upgrade

# ---------------------------------------------------------------------- the SAM translation


def translate(
    *without: str,
    each: bool = False,
    template: Path = ROOT / "template.yaml",
    parameters: dict[str, str] | None = None,
) -> Any:
    """``template`` (template.yaml) as the SAM translator of .venv-sam makes it (a subprocess,
    offline: fake credentials, no IAM lookups), given a deploy's ``parameters``; with ``each``,
    one translation per statement in ``without``."""
    if not SAM_PYTHON.exists():
        pytest.fail(
            "the permission test needs the deployment tools' venv: make .venv-sam/.installed"
        )
    args = [str(SAM_PYTHON), str(ROOT / "infra" / "transform.py"), str(template)]
    for name in without:
        args += ["--without", name]
    if each:
        args.append("--each")
    for name, value in (parameters or {}).items():
        args += ["--parameter", f"{name}={value}"]
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=120,
        env=fake_aws_env({"SAM_CLI_TELEMETRY": "0"}, clean=True),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ---------------------------------------------------------------------- events


def init_event(url: str, rollout_id: str, **changes: Any) -> Any:
    event = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, rollout_id=rollout_id)
    for name, value in changes.items():
        if value is NO_KEY:
            body.pop(name, None)
        else:
            body[name] = value
    event["body"] = json.dumps(body)
    return event


def submit_event(
    url: str, rollout_id: str, messages: list[dict[str, str]] | None = None, **metadata: Any
) -> Any:
    """An osmosis-ai 0.3.8 submit (``POST /rollout``) as API Gateway delivers it."""
    body = {
        "rollout_id": rollout_id,
        "initial_messages": messages or [{"role": "user", "content": "what is 2 + 3?"}],
        "chat_completions_url": f"{url}/v1",
        "llm_api_key": CALLBACK_KEY,
        "label": "5",
        "metadata": metadata,
    }
    return body_event("POST", "/rollout", body)


def body_event(method: str, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    event = path_event(method, path)
    event["body"] = json.dumps(body)
    event["headers"] = {**event["headers"], **(headers or {})}
    return event


def path_event(method: str, path: str) -> Any:
    event = load_event(EVENTS / "init.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event.pop("body", None)
    return event


def big_messages() -> list[dict[str, str]]:
    """A history about 220 KB compressed: the request and the response both go to S3."""
    history = [{"role": "user", "content": os.urandom(1100).hex()} for _ in range(100)]
    return [*history, {"role": "user", "content": "What is 6 * 7?"}]


def failure_record(job: dict[str, Any], **changes: Any) -> Any:
    record = load_event(EVENTS / "worker-failure.json")
    record["requestPayload"] = job
    record.update(changes)
    return record


# ---------------------------------------------------------------------- one scenario set


@dataclass
class Rig:
    """handler.py cold-started against one set of provisioned resources, under one set of
    template parameter values; every handler call runs with the recorder naming the function."""

    mode: str
    parameters: dict[str, str]
    module: Any
    resources: LocalResources
    traingate: TrainGateStandIn
    url: str
    recorder: Recorder
    names: dict[str, dict[str, str]]  # the template's logical ids -> what they are called here
    scenario: str = ""
    #: DurableWorker=true: the testing SDK's runner of DurableWorkerFunction's executions.
    runner: DurableFunctionTestRunner | None = None

    @property
    def runtime(self) -> Any:
        return self.module.runtime

    @property
    def durable(self) -> bool:
        return self.parameters.get("DurableWorker") == "true"

    def call(self, function: str, event: Any) -> Invocation:
        with self.recorder.running(self.mode, self.scenario, function):
            return invoke(self.module, function, event, timeout_seconds=TIMEOUTS[function])

    def init(self, rollout_id: str, status: int = 202, **changes: Any) -> Invocation:
        call = self.call("ApiFunction", init_event(self.url, rollout_id, **changes))
        assert call.result["statusCode"] == status, call.result
        return call

    def http(self, method: str, path: str, status: int) -> Invocation:
        call = self.call("ApiFunction", path_event(method, path))
        assert call.result["statusCode"] == status, call.result
        return call

    def received(self) -> list[dict[str, Any]]:
        return receive(self.runtime.clients.sqs, self.resources.queue_url)

    def run_worker(self, jobs: Invocation | list[dict[str, Any]]) -> list[Any]:
        """Run what the inits handed off: the invokes' events (direct), the queue's messages."""
        if self.parameters["HandOff"] == "queue":
            messages = self.received()
            return [self.call("QueueWorkerFunction", batch(messages)).result] if messages else []
        events = jobs.dispatched if isinstance(jobs, Invocation) else jobs
        if self.durable:
            return self.run_durable(events)
        return [self.call("WorkerFunction", event).result for event in events]

    def run_durable(self, events: list[dict[str, Any]]) -> list[Any]:
        """DurableWorkerFunction's execution of each rollout the invokes started, to its end,
        through the testing SDK's runner (a handler call per invocation, the checkpoints in its
        memory, durable waits skipped). Lambda starts one execution per name: a second invoke of
        a rollout's (a duplicate init's, the re-drive's of one already started) starts none."""
        assert self.runner is not None, "deployed with DurableWorker=true only"
        executions: dict[str, dict[str, Any]] = {}
        for event in events:
            executions.setdefault(execution_name(event["rollout_id"]), event)
        results = []
        with self.recorder.running(self.mode, self.scenario, "DurableWorkerFunction"):
            for name, event in executions.items():
                result = self.runner.run(
                    input=json.dumps(event), execution_timeout=120, execution_name=name
                )
                assert result.status is InvocationStatus.SUCCEEDED, (name, result.error)
                results.append(json.loads(result.result or "null"))
        return results

    def record(self, rollout_id: str) -> Any:
        return self.runtime.run(self.runtime.store.get(rollout_id, now=time.time()))

    def reports(self, rollout_id: str) -> list[str]:
        return [r["status"] for r in self.traingate.completions.get(rollout_id, [])]

    def rewrite(self, rollout_id: str, **numbers: float) -> None:
        """Set number attributes of the record's item directly: time passing, as set-up."""
        names = {f"#n{i}": name for i, name in enumerate(numbers)}
        values = {f":v{i}": {"N": repr(value)} for i, value in enumerate(numbers.values())}
        self.runtime.clients.dynamodb.update_item(
            TableName=self.resources.table_name,
            Key={"pk": {"S": ROLLOUT_PREFIX + rollout_id}},
            UpdateExpression="SET "
            + ", ".join(f"{n} = {v}" for n, v in zip(names, values, strict=True)),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def claim_and_die(self, rollout_id: str, *, finish: bool = False) -> None:
        """What a killed worker leaves: RUNNING (or FINISHED, before its callback), lease run out."""
        store, now = self.runtime.store, time.time()
        claimed = self.runtime.run(
            store.claim(
                rollout_id, attempt=1, lease_until=now - 1, expires_at=expiry(now, 3600), now=now
            )
        )
        assert claimed.applied
        if finish:
            response = RolloutResponse(
                rollout_id=rollout_id, status=RolloutStatus.COMPLETED, reward=0.5
            )
            finished = self.runtime.run(
                store.finish(
                    rollout_id,
                    attempt=1,
                    response=response,
                    lease_until=now - 1,
                    expires_at=expiry(now, 3600),
                    now=now,
                )
            )
            assert finished.applied

    def due_now(self, rollout_id: str) -> None:
        record = self.record(rollout_id)
        assert record is not None and record.next_attempt_at is not None, record
        moved = self.runtime.run(park_due_now(self.runtime.store, record, time.time()))
        assert moved.applied

    def redrive(self, event: Any = None) -> Any:
        return self.call("RedriveFunction", event or load_event(EVENTS / "redrive.json")).result


@contextmanager
def failing(
    client: Any,
    operation: str,
    code: str = "ThrottlingException",
    *,
    times: int = 0,
    when: Callable[[Mapping[str, Any]], bool] | None = None,
) -> Iterator[None]:
    """``operation`` (``lambda.Invoke``) of ``client`` fails as AWS's would (every time, or the
    first ``times``; only the calls whose parameters ``when`` picks, if given) while this
    lasts; the call is made (and recorded) before it fails."""
    left = [times]

    def fail(params: Mapping[str, Any] | None = None, **_: Any) -> None:
        if when is not None and not when(params or {}):
            return
        if times and left[0] <= 0:
            return
        left[0] -= 1
        raise ClientError({"Error": {"Code": code, "Message": "injected"}}, operation.split(".")[1])

    # The call's parameters as given (the recorder, attached first, has recorded it).
    event = f"before-{'parameter-build' if when else 'call'}.{operation}"
    client.meta.events.register(event, fail)
    try:
        yield
    finally:
        client.meta.events.unregister(event, fail)


@contextmanager
def durable_runner(handler: Callable[[Any, Any], Any]) -> Iterator[DurableFunctionTestRunner]:
    """The testing SDK's runner of ``handler``'s durable executions, closed after."""
    runner = DurableFunctionTestRunner(handler, skip_time=True)
    try:
        yield runner
    finally:
        runner.close()  # type: ignore[no-untyped-call]
        # Its close() (aws-durable-execution-sdk-python-testing 1.4.0) stops the scheduler's
        # event loop without closing it: closed here, or the loop's ResourceWarning (an error
        # under filterwarnings) fails whichever test the garbage collector meets it in.
        runner._scheduler._loop.close()


# ---------------------------------------------------------------------- the scenarios


def scenario(rig: Rig, name: str) -> None:
    rig.scenario = name


def common_paths(rig: Rig, p: str) -> None:
    """What both hand-off modes run: rollout ids start with ``p``."""
    api_dispatch = (
        (rig.runtime.clients.sqs, "sqs.SendMessage")
        if rig.parameters["HandOff"] == "queue"
        else (rig.runtime.clients.lambda_, "lambda.Invoke")
    )

    scenario(rig, "server key, created secret")
    rig.call("ApiFunction", load_event(EVENTS / "platform-health.json"))
    rig.call("ApiFunction", load_event(EVENTS / "health.json"))

    scenario(rig, "happy path")
    rig.run_worker(rig.init(f"{p}happy"))
    assert rig.reports(f"{p}happy") == ["COMPLETED"]
    rig.http("GET", f"/v1/rollout/{p}happy", 200)

    scenario(rig, "duplicate init while waiting for the worker")
    first = rig.init(f"{p}dup")
    again = rig.init(f"{p}dup")
    rig.run_worker([*first.dispatched, *again.dispatched])
    assert rig.reports(f"{p}dup") == ["COMPLETED"]

    scenario(rig, "agent error")
    job = rig.init(f"{p}agent")
    rig.traingate.inject("chat", Fault(400, rollout_id=f"{p}agent"))
    rig.run_worker(job)
    assert rig.reports(f"{p}agent") == ["ERROR"]

    scenario(rig, "kit failure in the worker")
    job = rig.init(f"{p}kit")
    with failing(
        rig.runtime.clients.dynamodb, "dynamodb.UpdateItem", "InternalServerError", times=1
    ):
        rig.run_worker(job)
    # The durable worker's claim is a step with the SDK's retries: the store's failure is
    # retried (durably), and the rollout runs.
    assert rig.reports(f"{p}kit") == ["COMPLETED" if rig.durable else "ERROR"]

    scenario(rig, "failed hand-off and release")
    with failing(*api_dispatch):
        rig.init(f"{p}handoff-failed", status=503)
    assert rig.record(f"{p}handoff-failed") is None
    if rig.parameters["HandOff"] == "queue":
        with failing(rig.runtime.clients.kms, "kms.Encrypt"):
            rig.init(f"{p}unsealed", status=503)
        assert rig.record(f"{p}unsealed") is None

    scenario(rig, "large payloads through S3")
    messages = big_messages()
    job = rig.init(f"{p}large", messages=messages)
    again = rig.init(f"{p}large", messages=messages)  # the duplicate reads the stored request
    rig.run_worker([*job.dispatched, *again.dispatched])
    assert rig.reports(f"{p}large") == ["COMPLETED"]
    rig.http("GET", f"/v1/rollout/{p}large", 200)

    scenario(rig, "status and cancel")
    job = rig.init(f"{p}cancel")
    rig.http("POST", f"/v1/rollout/{p}cancel/cancel", 202)
    rig.run_worker(job)
    assert rig.reports(f"{p}cancel") == ["ERROR"]
    rig.http("POST", f"/v1/rollout/{p}cancel/cancel", 409)
    # A rollout a duplicate sealed the key of, its hand-off lease run out with no worker: the
    # API function reports it itself.
    rig.init(f"{p}cancel-sealed")
    rig.init(f"{p}cancel-sealed")
    rig.rewrite(f"{p}cancel-sealed", lease_until=time.time() - 1)
    rig.http("POST", f"/v1/rollout/{p}cancel-sealed/cancel", 202)
    assert rig.reports(f"{p}cancel-sealed") == ["ERROR"]
    rig.http("GET", f"/v1/rollout/{p}cancel-sealed", 200)
    rig.http("GET", f"/v1/rollout/{p}nobody", 404)
    if rig.parameters["HandOff"] == "queue":
        rig.received()  # the cancelled rollouts' messages, run by nobody

    scenario(rig, "a callback that keeps failing is parked")
    parked: list[tuple[str, dict[str, Any]]] = [
        (f"{p}parked", {}),
        (f"{p}parked-large", {"messages": big_messages()}),
    ]
    for rid, changes in parked:
        rig.traingate.inject("completed", Fault(503, count=3, rollout_id=rid))
        rig.run_worker(rig.init(rid, **changes))
        assert rig.record(rid).sealed_key is not None

    scenario(rig, "re-drive: parked responses")
    for rid in (f"{p}parked", f"{p}parked-large"):
        rig.due_now(rid)
    assert rig.redrive()["delivered"] >= 2
    assert rig.reports(f"{p}parked") == ["COMPLETED"]

    scenario(rig, "re-drive: a duplicate's failed hand-off")
    for rid in (f"{p}handoff-again", f"{p}never-started"):
        rig.init(rid)  # handed off, and lost
        with failing(*api_dispatch):
            rig.init(rid)  # 202: the re-drive hands it off once its lease runs out
        now = time.time()
        rig.rewrite(rid, lease_until=now - 1, due_at=now - 1)
    rig.rewrite(f"{p}never-started", created_at=time.time() - 3 * 86400)
    if rig.parameters["HandOff"] == "queue":
        rig.received()  # the first inits' messages: they run nowhere, as if lost
    handed = rig.redrive()
    assert handed["handed_off"] >= 1, handed
    assert rig.reports(f"{p}never-started") == ["ERROR"]


def parked_before_the_index(rig: Rig, rid: str) -> None:
    """A response parked as a table written before the due index holds it: no index attributes."""
    rig.traingate.inject("completed", Fault(503, count=3, rollout_id=rid))
    rig.run_worker(rig.init(rid))
    rig.runtime.clients.dynamodb.update_item(
        TableName=rig.resources.table_name,
        Key={"pk": {"S": ROLLOUT_PREFIX + rid}},
        UpdateExpression="REMOVE #by, #at",
        ExpressionAttributeNames={"#by": DUE_PARTITION, "#at": DUE_SORT},
    )
    assert rig.record(rid).due_at is None


def backfill_paths(rig: Rig) -> None:
    """Deployed with BackfillDueIndex=true, the one deploy whose re-drive may scan."""
    scenario(rig, "re-drive: backfill of the due index (BackfillDueIndex=true)")
    rid = "b-before-index"
    parked_before_the_index(rig, rid)
    assert rig.redrive(BACKFILL)["backfilled"] == 1
    rig.due_now(rid)
    rig.redrive()
    assert rig.reports(rid) == ["COMPLETED"]


def direct_paths(rig: Rig) -> None:
    common_paths(rig, "d-")

    scenario(rig, "worker: a redelivered event finds its owner dead")
    rig.init("d-redelivered")
    rig.claim_and_die("d-redelivered", finish=True)
    rig.call(
        "WorkerFunction", {"rollout_id": "d-redelivered", "attempt": 1, "api_key": CALLBACK_KEY}
    )
    assert rig.reports("d-redelivered") == ["COMPLETED"]

    scenario(rig, "worker: a keyless job of a rollout a duplicate sealed the key of")
    keyless = rig.init("d-keyless", api_key=NO_KEY)
    rig.init("d-keyless")  # the same request with a key: sealed into the record
    rig.claim_and_die("d-keyless")
    rig.call("WorkerFunction", keyless.dispatched[0])
    assert rig.reports("d-keyless") == ["ERROR"]

    scenario(rig, "failure destination")
    aged = rig.init("d-aged").dispatched[0]
    record = failure_record(aged)
    record["requestContext"]["condition"] = "EventAgeExceeded"
    rig.call("WorkerFailureFunction", record)
    assert rig.reports("d-aged") == ["ERROR"]
    for rid, finish in (("d-timed-out", False), ("d-finished", True)):
        job = rig.init(rid).dispatched[0]
        rig.claim_and_die(rid, finish=finish)
        rig.call("WorkerFailureFunction", failure_record(job))
    assert rig.reports("d-finished") == ["COMPLETED"]
    job = rig.init("d-failed-large", messages=big_messages()).dispatched[0]
    rig.call("WorkerFailureFunction", failure_record(job))
    # An error message too large for the item: the ERROR response goes to S3.
    job = rig.init("d-long-error").dispatched[0]
    long_error = {"errorType": "RuntimeError", "errorMessage": os.urandom(160_000).hex()}
    rig.call("WorkerFailureFunction", failure_record(job, responsePayload=long_error))
    assert rig.reports("d-long-error") == ["ERROR"]
    rig.traingate.inject("completed", Fault(503, count=3, rollout_id="d-failed-parked"))
    job = rig.init("d-failed-parked").dispatched[0]
    rig.call("WorkerFailureFunction", failure_record(job))
    assert rig.record("d-failed-parked").sealed_key is not None
    keyless_job = rig.init("d-failed-keyless", api_key=NO_KEY).dispatched[0]
    rig.init("d-failed-keyless")
    rig.rewrite("d-failed-keyless", lease_until=time.time() - 1)  # retries took minutes
    rig.call("WorkerFailureFunction", failure_record(keyless_job))
    assert rig.reports("d-failed-keyless") == ["ERROR"]
    rig.call("WorkerFailureFunction", {"requestPayload": {}})  # rejected, touching nothing


def queue_paths(rig: Rig) -> None:
    common_paths(rig, "q-")

    scenario(rig, "queue batch: redelivery, a malformed message, an unsettled rollout")
    for rid in ("q-b1", "q-b2", "q-unsettled"):
        rig.init(rid)
    messages = rig.received()
    event = batch(messages)
    event["Records"].append({"messageId": "bad", "body": "{not json"})
    with unsettled(rig.module, "q-unsettled"):
        answer = rig.call("QueueWorkerFunction", event).result
    assert len(answer["batchItemFailures"]) == 1
    rig.call("QueueWorkerFunction", batch(messages))  # SQS delivers the batch again
    assert rig.reports("q-b1") == ["COMPLETED"] and rig.reports("q-unsettled") == ["COMPLETED"]

    scenario(rig, "dead letters")
    dead: list[dict[str, Any]] = []
    rig.init("q-dead")
    rig.init("q-dead-large", messages=big_messages())
    rig.traingate.inject("completed", Fault(503, count=3, rollout_id="q-dead-parked"))
    rig.init("q-dead-parked")
    for message in rig.received():
        dead.append({**message, "Attributes": {"ApproximateReceiveCount": "3"}})
    answer = rig.call("DeadLetterFunction", batch(dead)).result
    assert len(answer["rollouts"]) == 3
    assert rig.reports("q-dead") == ["ERROR"] and rig.reports("q-dead-large") == ["ERROR"]
    assert rig.record("q-dead-parked").sealed_key is not None


def durable_paths(rig: Rig) -> None:
    """DurableWorker=true (with HandOff=direct): every rollout a durable execution of
    DurableWorkerFunction, which the API function's invoke of its alias starts (and the
    re-drive's, of a rollout handed off again), named after the rollout, the key sealed."""
    common_paths(rig, "u-")
    alias = rig.names["DurableWorkerFunctionAlias" + ALIAS]["Ref"]

    scenario(rig, "durable: a duplicate init, Lambda answering that the execution exists")
    first = rig.init("u-started")
    (started,) = first.dispatched
    assert started.get(SEALED_KEY_FIELD) and "api_key" not in started, started
    with failing(
        rig.runtime.clients.lambda_, "lambda.Invoke", "DurableExecutionAlreadyStartedException"
    ):
        again = rig.init("u-started")  # 202: the rollout's one execution has it
    assert again.dispatched == []
    (result,) = rig.run_worker(first)
    assert result["state"] == "DELIVERED", result
    assert rig.reports("u-started") == ["COMPLETED"]

    scenario(rig, "durable: a kit failure after the claim settles the rollout")

    # The final response cannot be stored, nor the ERROR in its place: the worker's failure
    # settles the rollout from the record it reads.
    def finishing(params: Mapping[str, Any]) -> bool:
        return {"S": "FINISHED"} in params.get("ExpressionAttributeValues", {}).values()

    job = rig.init("u-kit-late")
    dynamodb = rig.runtime.clients.dynamodb
    with failing(dynamodb, "dynamodb.UpdateItem", "InternalServerError", times=2, when=finishing):
        (result,) = rig.run_worker(job)
    assert rig.reports("u-kit-late") == ["ERROR"], result

    scenario(rig, "durable: an answer over the checkpoint limit kept in the payload bucket")
    rid = "u-big-answer"
    scripted = rig.traingate.model

    class Padded:
        """The scripted model, its answers to this rollout 300 KB longer."""

        def reply(self, body: dict[str, Any]) -> dict[str, Any]:
            answer = scripted.reply(body)
            if body.get("rollout_id") == rid:
                message = answer["choices"][0]["message"]
                message["content"] = (message.get("content") or "") + " " + "x" * 300_000
            return answer

    rig.traingate.model = Padded()
    try:
        (result,) = rig.run_worker(rig.init(rid))
    finally:
        rig.traingate.model = scripted
    assert result["state"] == "DELIVERED", result
    stored = [
        c
        for c in rig.recorder.calls
        if c.mode == rig.mode
        and c.scenario.startswith("durable: an answer")
        and c.name == "s3.PutObject"
    ]
    assert {c.function for c in stored} == {"DurableWorkerFunction"}
    assert all(str(c.params["Key"]).startswith("checkpoints/") for c in stored), stored

    scenario(rig, "re-drive: a durable rollout handed off again runs")
    rid = "u-again-runs"
    rig.init(rid)  # its execution never starts
    with failing(rig.runtime.clients.lambda_, "lambda.Invoke"):
        rig.init(rid)  # 202: the key sealed into the record, for the re-drive
    now = time.time()
    rig.rewrite(rid, lease_until=now - 1, due_at=now - 1)
    handed = rig.call("RedriveFunction", load_event(EVENTS / "redrive.json"))
    assert handed.result["handed_off"] == 1, handed.result
    (redriven,) = handed.dispatched
    assert redriven.get(SEALED_KEY_FIELD) and "api_key" not in redriven, redriven
    (result,) = rig.run_worker(handed)
    assert result["state"] == "DELIVERED", result
    assert rig.reports(rid) == ["COMPLETED"]

    # Every hand-off (the API function's, the re-drive's) started the durable worker's
    # execution through its alias, named after the rollout.
    invokes = [c for c in rig.recorder.calls if c.mode == rig.mode and c.name == "lambda.Invoke"]
    assert {c.function for c in invokes} == {"ApiFunction", "RedriveFunction"}
    assert {c.params["FunctionName"] for c in invokes} == {alias}
    names = {c.params.get("DurableExecutionName") for c in invokes}
    assert None not in names and {execution_name("u-started"), execution_name(rid)} <= names


def workflow_paths(rig: Rig) -> None:
    """A deploy with a Workflow: 0.3.8's submit, poll, cancel (by ids, prefix and all, the
    latter two from the live index), /health's count, and a lease that ran out found by the
    next poll and by the re-drive's pass."""
    scenario(rig, "0.3.8: submit, poll, the worker, a graded result")
    for rid, messages in (("w-graded", None), ("w-large", big_messages())):
        submitted = rig.call("ApiFunction", submit_event(rig.url, rid, messages))
        assert submitted.result["statusCode"] == 202, submitted.result
        token = json.loads(submitted.result["body"])["polling_lease_token"]
        rig.run_worker(submitted)
        # A new environment of the poll function: it reads the server key itself.
        rig.runtime.server_keys._provider.clear_cache()
        poll = path_event("GET", f"/rollout/{rid}/result")
        poll["headers"] = {**poll["headers"], LEASE_HEADER: token}
        answer = rig.call("PollFunction", poll).result
        assert json.loads(answer["body"])["status"] == "success", answer

    scenario(rig, "0.3.8: cancel by ids, prefix and all; /health counts the live ones")
    jobs = {}
    for rid in ("w-ids", "w-prefix-1", "w-all"):
        jobs[rid] = rig.call("ApiFunction", submit_event(rig.url, rid))
    health = rig.call("ApiFunction", load_event(EVENTS / "health.json")).result
    assert json.loads(health["body"])["lifecycle"]["active_rollouts"] == 3, health
    for selector in ({"ids": ["w-ids"]}, {"prefix": "w-prefix-"}, {"all": True}):
        cancelled = rig.call("ApiFunction", body_event("POST", "/rollout/cancel", selector))
        assert cancelled.result["statusCode"] == 200, cancelled.result
    for job in jobs.values():
        rig.run_worker(job)  # each finds its cancel before it starts
    assert rig.record("w-all").state.value == "DELIVERED"

    scenario(rig, "0.3.8: a worker whose retries were spent, reported by the destination")
    lost = rig.call("ApiFunction", submit_event(rig.url, "w-lost")).dispatched[0]
    rig.call("WorkerFailureFunction", failure_record(lost))
    ended = rig.record("w-lost")
    assert ended.state.value == "DELIVERED" and ended.response["status"] == "ERROR", ended

    scenario(rig, "0.3.8: a lease that ran out, found by the next poll")
    late = rig.call("ApiFunction", submit_event(rig.url, "w-late-poll"))
    late_token = json.loads(late.result["body"])["polling_lease_token"]
    rig.rewrite("w-late-poll", poll_until=time.time() - 1)
    poll = path_event("GET", "/rollout/w-late-poll/result")
    poll["headers"] = {**poll["headers"], LEASE_HEADER: late_token}
    answer = rig.call("PollFunction", poll).result
    assert json.loads(answer["body"])["err_category"] == "lease_expired", answer

    scenario(rig, "0.3.8: a lease that ran out, found by the re-drive")
    rig.call("ApiFunction", submit_event(rig.url, "w-late-redrive"))
    rig.rewrite("w-late-redrive", poll_until=time.time() - 1)
    assert rig.redrive()["leases_expired"] == 1
    assert rig.record("w-late-redrive").cancel_reason == "lease_expired"


def given_secret_paths(rig: Rig) -> None:
    scenario(rig, "server key, given secret")
    rig.call("ApiFunction", load_event(EVENTS / "platform-health.json"))
    rig.run_worker(rig.init("g-happy"))
    rig.http("GET", "/v1/rollout/g-happy", 200)
    assert rig.reports("g-happy") == ["COMPLETED"]


# ---------------------------------------------------------------------- running them


def physical_names(
    resources: LocalResources,
    endpoint: str,
    prefix: str,
    given_secret: str | None,
    worker: str = "WorkerFunction",
) -> dict[str, dict[str, str]]:
    """The template's logical ids -> what the scenario's resources are called (Ref, Arn);
    ``worker``: the function the emulator's provisioned worker (whose alias the hand-offs
    invoke) stands for."""
    sqs = local_client("sqs", endpoint)
    policy = sqs.get_queue_attributes(
        QueueUrl=resources.queue_url, AttributeNames=["RedrivePolicy"]
    )
    dead_letter_arn = json.loads(policy["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"]
    dead_letter_url = sqs.get_queue_url(QueueName=dead_letter_arn.rsplit(":", 1)[1])["QueueUrl"]
    key = local_client("kms", endpoint).describe_key(KeyId=resources.kms_key_id)["KeyMetadata"][
        "Arn"
    ]
    assert key == key_arn(resources.kms_key_id)
    names: dict[str, dict[str, str]] = {
        "RolloutTable": {"Ref": resources.table_name, "Arn": table_arn(resources.table_name)},
        "PayloadBucket": {"Ref": resources.bucket, "Arn": f"arn:aws:s3:::{resources.bucket}"},
        "RolloutQueue": {"Ref": resources.queue_url, "Arn": queue_arn(resources.queue_url)},
        "RolloutDeadLetterQueue": {"Ref": dead_letter_url, "Arn": dead_letter_arn},
        "CallbackKeyKey": {"Ref": resources.kms_key_id, "Arn": key},
    }
    if given_secret is None:
        names["ServerKeySecret"] = {"Ref": resources.secret_arn}
    else:  # a parameter, not a resource: only the report's labels use this name
        names["ServerKeySecretArn"] = {"Ref": given_secret}
    for function in TIMEOUTS:
        name = resources.worker_function if function == worker else f"{prefix}-{function}"
        names[function] = {"Ref": name, "Arn": function_arn(name)}
        # AutoPublishAlias: the alias resource's Ref is its ARN (the emulator publishes the
        # worker's, which the API function invokes).
        names[f"{function}Alias{ALIAS}"] = {"Ref": f"{function_arn(name)}:{ALIAS}"}
    return names


@dataclass
class Recording:
    recorder: Recorder
    rigs: dict[str, tuple[dict[str, str], dict[str, dict[str, str]]]]  # mode -> (parameters, names)


@contextmanager
def recorded_clients(recorder: Recorder) -> Iterator[pytest.MonkeyPatch]:
    """An environment without the kit's variables, in the project folder, in which every boto3
    client made is attached to ``recorder``: the runtime's (built on first use, in the
    handlers) and any a library might make of its own."""
    real_create_client = botocore.session.Session.create_client

    def create_client(self: botocore.session.Session, *args: Any, **kwargs: Any) -> Any:
        client = real_create_client(self, *args, **kwargs)
        recorder.attach(client)
        return client

    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith(VARIABLE_PREFIXES):
                mp.delenv(name)
        mp.chdir(ROOT)
        mp.setattr(botocore.session.Session, "create_client", create_client)
        yield mp
    reset_settings()


@contextmanager
def deployed(
    mp: pytest.MonkeyPatch,
    moto_endpoint: str,
    mode: str,
    parameters: dict[str, str],
    recorder: Recorder,
    traingate: TrainGateStandIn,
    url: str,
) -> Iterator[Rig]:
    """handler.py cold-started against resources of its own, as a deploy with ``parameters``
    makes them (a mode naming "given" gets a secret of its own, as ServerKeySecretArn)."""
    prefix = f"perm-{uuid.uuid4().hex[:8]}"
    template = load_template(ROOT / "template.yaml")
    resources = provision(
        moto_endpoint,
        template_path=ROOT / "template.yaml",
        agent_loop="examples.calculator.agent:agent_loop",
        server_key=SERVER_KEY,
        prefix=prefix,
    )
    env = function_environment(
        template, "ApiFunction", resources, {**LOOPBACK_TRAINGATE, **parameters}
    )
    env["HAND_OFF"] = parameters["HandOff"]
    parameters = dict(parameters)
    given = None
    if "given" in mode:
        secrets = local_client("secretsmanager", moto_endpoint)
        given = secrets.create_secret(Name=f"{prefix}-given-key", SecretString=SERVER_KEY)["ARN"]
        env["SERVER_KEY_SECRET_ARN"] = given
        parameters["ServerKeySecretArn"] = str(given)
    for key, value in env.items():
        mp.setenv(key, value)
    durable = parameters.get("DurableWorker") == "true"
    worker = "DurableWorkerFunction" if durable else "WorkerFunction"
    names = physical_names(resources, moto_endpoint, prefix, given, worker)
    module = import_handler(env)
    rig = Rig(mode, parameters, module, resources, traingate, url, recorder, names)
    try:
        module.runtime.settings.client.retry_base_delay = 0.01
        module.runtime.settings.client.retry_max_delay = 0.02
        if durable:
            with durable_runner(module.durable_worker) as rig.runner:
                yield rig
        else:
            yield rig
    finally:
        module.runtime.close()
        sys.modules.pop("handler", None)


@pytest.fixture(scope="module")
def recording(moto_endpoint: str) -> Iterator[Recording]:
    recorder = Recorder()
    rigs: dict[str, tuple[dict[str, str], dict[str, dict[str, str]]]] = {}
    traingate = TrainGateStandIn(callback_key=CALLBACK_KEY)
    sets: list[tuple[str, dict[str, str], Callable[[Rig], None]]] = [
        ("direct", {"HandOff": "direct"}, direct_paths),
        ("queue", {"HandOff": "queue"}, queue_paths),
        ("direct, given secret", {"HandOff": "direct"}, given_secret_paths),
        ("direct, backfill", {"HandOff": "direct", "BackfillDueIndex": "true"}, backfill_paths),
        ("durable", DURABLE, durable_paths),
        ("workflow", WORKFLOW, workflow_paths),
    ]
    with recorded_clients(recorder) as mp, ServerThread(traingate.app) as server:
        for mode, parameters, paths in sets:
            with deployed(
                mp, moto_endpoint, mode, parameters, recorder, traingate, server.url
            ) as rig:
                paths(rig)
            rigs[mode] = (rig.parameters, rig.names)
    yield Recording(recorder, rigs)


@pytest.fixture(scope="module")
def translated() -> Any:
    return translate()


@pytest.fixture(scope="module")
def translated_durable() -> Any:
    """The translation a deploy with DurableWorker=true gets."""
    return translate(parameters=DURABLE)


@dataclass
class Check:
    """The verdicts on one translation: every call's needs and every service need, per mode."""

    verdicts: list[tuple[str, Verdict, Call | None]]  # (mode, verdict, the call; None: service)

    @property
    def denied(self) -> list[tuple[str, Verdict, Call | None]]:
        return [v for v in self.verdicts if not v[1].allowed]


def check(recording: Recording, translated: Any) -> Check:
    verdicts: list[tuple[str, Verdict, Call | None]] = []
    for mode, (parameters, names) in recording.rigs.items():
        stack = Stack(translated, parameters, names)
        functions = stack.functions()
        for call in recording.recorder.calls:
            if call.mode != mode:
                continue
            assert call.function in functions, (
                f"{call.function} calls AWS but is not deployed in {mode}"
            )
            for verdict in stack.judge(call.function, needs_of(call)):
                verdicts.append((mode, verdict, call))
        for function in functions:
            for verdict in stack.judge(function, stack.service_needs(function)):
                verdicts.append((mode, verdict, None))
    return Check(verdicts)


def describe(
    mode: str, verdict: Verdict, call: Call | None, names: dict[str, dict[str, str]]
) -> str:
    need = verdict.need
    where = f"{call.scenario}" if call else "the Lambda service"
    return f"[{mode}] {verdict.function}: {need.origin} -> {need.action} on {resource_label(need.resource, names)} ({where})"


# ---------------------------------------------------------------------- the tests


def test_every_call_each_function_makes_is_allowed_by_its_role(
    recording: Recording, translated: Any
) -> None:
    result = check(recording, translated)
    calls = [v for v in result.verdicts if v[2] is not None]
    assert calls, "nothing was recorded"
    # Every function made calls, in each mode that invokes it.
    ran = {(c.mode, c.function) for c in recording.recorder.calls}
    direct = {"ApiFunction", "WorkerFunction", "WorkerFailureFunction", "RedriveFunction"}
    queue = {"ApiFunction", "QueueWorkerFunction", "DeadLetterFunction", "RedriveFunction"}
    durable = {"ApiFunction", "DurableWorkerFunction", "RedriveFunction"}
    assert {f for m, f in ran if m == "direct"} == direct
    assert {f for m, f in ran if m == "queue"} == queue
    assert {f for m, f in ran if m == "durable"} == durable

    table: dict[str, dict[tuple[str, str, str, str], set[str]]] = defaultdict(
        lambda: defaultdict(set)
    )
    for mode, verdict, _ in calls:
        names = recording.rigs[mode][1]
        statements = ", ".join(sorted({g.label for g in verdict.allowed_by})) or "DENIED"
        row = (
            verdict.need.origin,
            verdict.need.action,
            resource_label(verdict.need.resource, names),
            statements,
        )
        table[verdict.function][row].add(mode)
    print("\nEvery AWS call each function makes, and the statement that allows it:")
    for function in sorted(table):
        print(f"\n{function}")
        for (origin, action, resource, statements), modes in sorted(table[function].items()):
            print(
                f"  {origin:36} {action:32} {resource:42} {statements}  [{'; '.join(sorted(modes))}]"
            )

    denied = [describe(m, v, c, recording.rigs[m][1]) for m, v, c in result.denied if c is not None]
    assert denied == []


def test_every_call_is_an_operation_the_kits_botocore_data_keeps(recording: Recording) -> None:
    """The kit's clients read service models cut to OPERATIONS (infra/botocore_data.py), where
    any other operation is no method at all: every call each function made, on every path above,
    must be one of them. So must every call the durable execution SDK makes through the kit's
    Lambda client (its checkpoints run in the testing runner's service here, not recorded)."""
    import re

    from aws_durable_execution_sdk_python import lambda_service
    from botocore import xform_name

    from rollout_sdk.aws.clients import OPERATIONS

    made = {(c.service, c.operation) for c in recording.recorder.calls}
    assert made, "nothing was recorded"
    kept = {(service, op) for service, ops in OPERATIONS.items() for op in ops}
    assert made - kept == set()
    sdk_calls = set(
        re.findall(r"self\.client\.([a-z_]+)\(", Path(lambda_service.__file__).read_text())
    )
    assert sdk_calls, "the SDK's Lambda calls were not found where they were"
    assert sdk_calls <= {xform_name(op) for op in OPERATIONS["lambda"]}
    # Each kept operation is one the permission table knows (so its grants are checked), but
    # the SDK's checkpoints, which the managed policy grants (checked on the durable worker's own
    # ARN by test_the_durable_worker_role_grants_its_checkpoints_on_its_own_arn).
    checkpoints = {("lambda", action.split(":")[1]) for action in DURABLE_EXECUTION_ACTIONS}
    assert kept - set(permissions.OPERATIONS) == checkpoints


def test_what_the_lambda_service_does_with_each_role_is_granted(
    recording: Recording, translated: Any
) -> None:
    result = check(recording, translated)
    service = [v for v in result.verdicts if v[2] is None]
    assert any(v.need.action == "lambda:InvokeFunction" for _, v, _ in service)  # the destination
    assert any(v.need.action == "sqs:ReceiveMessage" for _, v, _ in service)  # queue polling
    checkpoints = {v.need.action for _, v, _ in service if v.function == "DurableWorkerFunction"}
    assert set(DURABLE_EXECUTION_ACTIONS) <= checkpoints
    rows: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for _mode, verdict, _ in service:
        statements = ", ".join(sorted({g.label for g in verdict.allowed_by})) or "DENIED"
        rows[(verdict.function, verdict.need.origin, statements)].add(verdict.need.action)
    print("\nWhat the Lambda service does with each role (the allowlist), and what grants it:")
    for (function, origin, statements), actions in sorted(rows.items()):
        print(f"  {function:22} {origin:58} {', '.join(sorted(actions))}: {statements}")
    denied = [describe(m, v, c, recording.rigs[m][1]) for m, v, c in result.denied if c is None]
    assert denied == []


def deployment(parameters: dict[str, str]) -> str:
    """The kind of deploy a scenario set's parameter values make, as the unused-grant check
    tells them apart: its HandOff, and DurableWorker=true (another worker, its hand-offs)."""
    kind = f"HandOff={parameters['HandOff']}"
    return kind + (", DurableWorker=true" if parameters.get("DurableWorker") == "true" else "")


def unused_grants(recording: Recording, translated: Any) -> list[str]:
    """Each action on each resource of a statement, in a kind of deploy (:func:`deployment`) in
    which its function runs, that no call and no service need of that kind used (each scenario
    set resolves the statement to its own resources: a statement is the same one by its label
    and position)."""
    result = check(recording, translated)
    used: set[tuple[str, str, str, str, int]] = set()
    for mode, verdict, _ in result.verdicts:
        hand_off = deployment(recording.rigs[mode][0])
        for grant in verdict.allowed_by:
            for action in grant.actions:
                for index, resource in enumerate(grant.resources):
                    need = verdict.need
                    if action_matches(action, need.action) and resource_matches(
                        resource, need.resource
                    ):
                        used.add((hand_off, grant.function, grant.label, action, index))
    invoked = recording.recorder.invoked
    ran = {(deployment(recording.rigs[mode][0]), function) for mode, function in invoked}
    unused = set()
    for parameters, names in recording.rigs.values():
        hand_off = deployment(parameters)
        stack = Stack(translated, parameters, names)
        for function in stack.functions():
            if (hand_off, function) not in ran:
                # Deployed, never invoked in this kind of deploy (the direct worker, with
                # queue; the plain worker and its failure destination, with the durable one).
                continue
            for grant in stack.grants(function):
                if grant.source == "managed":
                    continue  # the Lambda service's own; never trimmed
                for action in grant.actions:
                    for index, resource in enumerate(grant.resources):
                        if (hand_off, function, grant.label, action, index) not in used:
                            where = resource_label(resource, names)
                            unused.add(f"{hand_off}: {function} {grant.label}: {action} on {where}")
    return sorted(unused)


def test_no_statement_grants_what_nothing_uses(recording: Recording, translated: Any) -> None:
    unused = unused_grants(recording, translated)
    print("\nGranted but unused:" + ("".join(f"\n  {u}" for u in unused) or " none"))
    assert unused == []


def test_removing_any_one_statement_of_the_template_fails_the_check(
    recording: Recording, translated: Any
) -> None:
    """The demonstration: each statement of template.yaml removed in turn from a copy, the copy
    translated again, the same calls and service needs judged against it."""
    labels: set[str] = set()
    for parameters, names in recording.rigs.values():
        stack = Stack(translated, parameters, names)
        for function in stack.functions():
            labels |= {
                f"{function}.{g.label}" for g in stack.grants(function) if g.source == "template"
            }
    statements = sorted(labels)
    assert len(statements) >= 10

    def key(denied: tuple[str, Verdict, Call | None]) -> tuple[str, ...]:
        mode, verdict, call = denied
        need = verdict.need
        return (
            mode,
            verdict.function,
            need.origin,
            need.action,
            need.resource,
            call.scenario if call else "",
        )

    baseline = {key(d) for d in check(recording, translated).denied}
    variants = translate(*statements, each=True)
    print("\nEach statement removed from a copy of template.yaml, translated again, checked:")
    survived = []
    for statement in statements:
        denied = [d for d in check(recording, variants[statement]).denied if key(d) not in baseline]
        if not denied:
            survived.append(statement)
        example = describe(*denied[0], recording.rigs[denied[0][0]][1]) if denied else "nothing"
        print(f"  without {statement:40} -> {len(denied):3} denied, e.g. {example}")
    assert survived == [], "statements nothing needs"


@pytest.mark.parametrize("hand_off", ["direct", "queue"])
def test_only_the_redrive_may_scan_and_only_with_backfill_due_index_true(
    translated: Any, hand_off: str
) -> None:
    """issue 20: the Scan only the one-off backfill needs is no permanent grant."""
    parameter = translated["Parameters"]["BackfillDueIndex"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("false", ["false", "true"])
    for given in ({}, {"BackfillDueIndex": "false"}, {"BackfillDueIndex": "true"}):
        stack = stack_named_by_ids(translated, HandOff=hand_off, **given)
        table = str(stack.value({"Fn::GetAtt": ["RolloutTable", "Arn"]}))
        # Every statement of every role (managed policies too) that would allow a Scan of anything.
        scans = [
            (function, grant.label, grant.resources)
            for function in stack.functions()
            for grant in stack.grants(function)
            if grant.effect == "Allow"
            and any(action_matches(a, "dynamodb:Scan") for a in grant.actions)
        ]
        expected = (
            [("RedriveFunction", "BackfillDueIndex", (table,))]
            if given.get("BackfillDueIndex") == "true"
            else []
        )
        assert scans == expected, given


def test_the_durable_worker_role_grants_its_checkpoints_on_its_own_arn(
    translated: Any, translated_durable: Any
) -> None:
    """issue 25: with DurableWorker=true, SAM gives DurableWorkerFunction's role the managed
    policy AWSLambdaBasicDurableExecutionRolePolicy in place of AWSLambdaBasicExecutionRole:
    the durable execution SDK's checkpoints, on the function's own executions (an allowlisted
    service need, judged granted by that policy alone). No statement of the template grants
    them, to any role. The hand-offs name the durable worker's alias, and the re-drive may seal
    the key of what it hands off again; with DurableWorker=false, none of it."""
    # The recording's durable scenario set is judged against ``translated``: what SAM makes
    # of the template with DurableWorker=true is that same document.
    assert translated_durable == translated
    parameter = translated_durable["Parameters"]["DurableWorker"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("false", ["false", "true"])
    durable_policy = "managed:" + DURABLE_POLICY.rsplit("/", 1)[1]
    for given in ({}, {"DurableWorker": "false"}, {"DurableWorker": "true"}):
        durable = given.get("DurableWorker") == "true"
        stack = stack_named_by_ids(translated_durable, HandOff="direct", **given)
        functions = stack.functions()
        assert ("DurableWorkerFunction" in functions) == durable, given
        granting = {
            (function, grant.label)
            for function in functions
            for grant in stack.grants(function)
            if any(action_matches(a, d) for a in grant.actions for d in DURABLE_EXECUTION_ACTIONS)
        }
        assert granting == ({("DurableWorkerFunction", durable_policy)} if durable else set())
        worker = "DurableWorkerFunction" if durable else "WorkerFunction"
        alias = stack.value({"Ref": f"{worker}Alias{ALIAS}"})
        hand_offs = {
            (function, grant.label): grant.resources
            for function in ("ApiFunction", "RedriveFunction")
            for grant in stack.grants(function)
            if grant.label in ("HandOff", "HandOffAgain")
        }
        assert hand_offs == {
            ("ApiFunction", "HandOff"): (alias,),
            ("RedriveFunction", "HandOffAgain"): (alias,),
        }, given
        key = stack.value({"Fn::GetAtt": ["CallbackKeyKey", "Arn"]})
        seals = [
            g.resources for g in stack.grants("RedriveFunction") if g.label == "SealQueuedKeys"
        ]
        assert seals == ([(key,)] if durable else []), given
        for function in ("WorkerFunction", *(["DurableWorkerFunction"] if durable else [])):
            role = translated_durable["Resources"][stack.role_of(function)]["Properties"]
            managed = stack.value(role["ManagedPolicyArns"])
            kept, instead = (
                (DURABLE_POLICY, BASIC_POLICY)
                if function == "DurableWorkerFunction"
                else (BASIC_POLICY, DURABLE_POLICY)
            )
            assert kept in managed and instead not in managed, (function, managed)
        if not durable:
            continue
        arn = str(stack.value({"Fn::GetAtt": [worker, "Arn"]}))
        needs = [n for n in stack.service_needs(worker) if n.action in DURABLE_EXECUTION_ACTIONS]
        assert sorted(n.action for n in needs) == sorted(DURABLE_EXECUTION_ACTIONS)
        assert all(n.resource.startswith(f"{arn}:") for n in needs), needs  # its executions
        own = [*needs, *(Need(a, arn, "the function") for a in DURABLE_EXECUTION_ACTIONS)]
        for verdict in stack.judge(worker, own):
            assert [g.label for g in verdict.allowed_by] == [durable_policy], verdict


@pytest.mark.parametrize("grant", ["false", "true"])
def test_the_backfill_runs_where_its_scan_is_granted_and_is_refused_cleanly_elsewhere(
    moto_endpoint: str, translated: Any, grant: str
) -> None:
    """The backfill on moto under IAM's answer: the recorder enforces the re-drive's role as
    template.yaml grants it with BackfillDueIndex=``grant`` (moto's server checks no policy)."""
    recorder = Recorder()
    traingate = TrainGateStandIn(callback_key=CALLBACK_KEY)
    parameters = {"HandOff": "direct", "BackfillDueIndex": grant}
    with recorded_clients(recorder) as mp, ServerThread(traingate.app) as server:
        mode = f"BackfillDueIndex={grant}"
        with deployed(mp, moto_endpoint, mode, parameters, recorder, traingate, server.url) as rig:
            recorder.enforce = Stack(translated, rig.parameters, rig.names)
            scenario(rig, "re-drive: backfill of the due index")
            rid = "before-index"
            parked_before_the_index(rig, rid)
            answer = rig.redrive(BACKFILL)
            refused = [
                (v.function, v.need.action, resource_label(v.need.resource, rig.names))
                for v in recorder.refused
            ]
            if grant == "true":
                assert answer == {"status": "done", "backfilled": 1}
                assert refused == []
                rig.due_now(rid)
                rig.redrive()
                assert rig.reports(rid) == ["COMPLETED"]
            else:
                assert refused == [("RedriveFunction", "dynamodb:Scan", "${RolloutTable.Arn}")]
                assert answer["status"] == "rejected", answer
                error = answer["error"]
                assert "deploy the stack with BackfillDueIndex=true" in error, error
                assert "then deploy again with BackfillDueIndex=false" in error, error
                assert "AccessDeniedException" in error  # and what DynamoDB said
                assert rig.record(rid).due_at is None  # nothing moved


def test_the_payload_bucket_refuses_every_request_not_over_tls(
    recording: Recording, translated: Any
) -> None:
    """issue 20: a Deny of s3:* on the bucket and its objects unless aws:SecureTransport, judged
    on every S3 call the functions made and on what else anyone could ask of the bucket."""
    policies = {
        logical: resource
        for logical, resource in translated["Resources"].items()
        if resource["Type"] == "AWS::S3::BucketPolicy"
    }
    assert list(policies) == ["PayloadBucketPolicy"]
    bucket_props = translated["Resources"]["PayloadBucket"]["Properties"]
    # What the bucket had before stays: encryption, no public access, the lifecycle.
    assert set(bucket_props) >= {
        "BucketEncryption",
        "PublicAccessBlockConfiguration",
        "LifecycleConfiguration",
    }
    assert all(bucket_props["PublicAccessBlockConfiguration"].values())
    over_http, over_tls = {"aws:SecureTransport": "false"}, {"aws:SecureTransport": "true"}
    checked = 0
    for mode, (parameters, names) in recording.rigs.items():
        stack = Stack(translated, parameters, names)
        properties = stack.value(policies["PayloadBucketPolicy"]["Properties"])
        bucket, arn = names["PayloadBucket"]["Ref"], names["PayloadBucket"]["Arn"]
        assert properties["Bucket"] == bucket
        document = properties["PolicyDocument"]
        assert document["Statement"] == [
            {
                "Sid": "RefuseNonTls",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
        made = [
            need
            for call in recording.recorder.calls
            if call.mode == mode and call.service == "s3"
            for need in needs_of(call)
        ]
        checked += len(made)
        anyone = [
            *(Need(a, arn, "the bucket") for a in ("s3:ListBucket", "s3:PutBucketPolicy")),
            *(Need(a, f"{arn}/k/1", "an object") for a in ("s3:GetObject", "s3:DeleteObject")),
        ]
        for need in [*made, *anyone]:
            assert denied_by(document, need.action, need.resource, over_http) == ["RefuseNonTls"]
            assert denied_by(document, need.action, need.resource, over_tls) == []
        assert denied_by(document, "s3:GetObject", f"{arn}-other/k", over_http) == []
    assert checked > 0  # the large payloads' paths put and get objects


def test_the_operation_table_checks_what_aws_checks() -> None:
    def needs(service: str, operation: str, **params: Any) -> list[tuple[str, str]]:
        call = Call("m", "s", "F", service, operation, params)
        return [(n.action, n.resource) for n in needs_of(call)]

    table = table_arn("t")
    assert needs(
        "dynamodb",
        "TransactWriteItems",
        TransactItems=[("Put", "t"), ("Delete", "t"), ("ConditionCheck", "t")],
    ) == [
        ("dynamodb:PutItem", table),
        ("dynamodb:DeleteItem", table),
        ("dynamodb:ConditionCheckItem", table),
    ]
    assert needs("dynamodb", "Query", TableName="t", IndexName="due") == [
        ("dynamodb:Query", f"{table}/index/due")
    ]
    assert needs("s3", "HeadObject", Bucket="b", Key="k/1") == [
        ("s3:GetObject", "arn:aws:s3:::b/k/1")
    ]
    assert needs(
        "sqs", "SendMessage", QueueUrl="https://sqs.us-east-1.amazonaws.com/123456789012/q"
    ) == [("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q")]
    assert needs("lambda", "Invoke", FunctionName="w") == [
        ("lambda:InvokeFunction", function_arn("w"))
    ]
    # Starting a durable execution is an invoke, checked on the (qualified) function it names.
    alias = f"{function_arn('w')}:{ALIAS}"
    started = identifiers(
        "Invoke", {"FunctionName": alias, "DurableExecutionName": "r", "Payload": b""}
    )
    assert started == {"FunctionName": alias, "DurableExecutionName": "r"}
    assert needs("lambda", "Invoke", **started) == [("lambda:InvokeFunction", alias)]
    with pytest.raises(KeyError, match="OPERATIONS"):
        needs("dynamodb", "DescribeTable", TableName="t")
    assert resource_matches("arn:aws:s3:::b/*", "arn:aws:s3:::b/k/1")
    assert not resource_matches("arn:aws:s3:::b/*", "arn:aws:s3:::bb/k")
    assert not resource_matches(table, f"{table}/index/due")  # an index needs its own grant
    deny = {
        "Statement": {
            "Sid": "D",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "s3:Get*",
            "Resource": "arn:aws:s3:::b/*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    }
    plain = {"AWS:SECURETRANSPORT": "FALSE"}  # keys and Bool values match case-insensitively
    assert denied_by(deny, "s3:GetObject", "arn:aws:s3:::b/k", plain) == ["D"]
    assert denied_by(deny, "s3:PutObject", "arn:aws:s3:::b/k", plain) == []
    assert denied_by(deny, "s3:GetObject", "arn:aws:s3:::b/k", {}) == []  # no key: no match
    with pytest.raises(ValueError, match="condition operator"):
        denied_by(
            {"Statement": [{**deny["Statement"], "Condition": {"IpAddress": {}}}]},
            "s3:GetObject",
            "arn:aws:s3:::b/k",
            plain,
        )
    assert Need("a", "r", "o") == Need("a", "r", "o")
