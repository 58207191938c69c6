"""The callback key is never in clear where the account's users can read it (issue 10, item 3).

Queue mode: the rollout queue's and the dead-letter queue's messages carry it sealed with the
stack's KMS key; the table holds it sealed only while a response is parked; S3, the logs, the
answers and the error messages never hold it. Direct mode: the asynchronous invocation's payload
(Lambda's own queue, and the failure destination's record made from it) is the only place.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rollout_sdk.aws.clients import AwsClients
from rollout_sdk.aws.runtime import LambdaRuntime
from rollout_sdk.dispatch.base import Job
from rollout_sdk.dispatch.sealed import SEALED_KEY_FIELD, job_from_message, message_body
from rollout_sdk.errors import ConfigurationError, StoreError
from rollout_sdk.local.emulator import LocalResources, load_template
from rollout_sdk.local.invoke import function_environment, import_handler, invoke, load_event
from rollout_sdk.settings import load_settings
from rollout_sdk.store.record import RecordState
from rollout_sdk.testing.standin import LOOPBACK_TRAINGATE, Fault, TrainGateStandIn

from .conftest import CALLBACK_KEY, ROOT
from .test_queue_handoff import batch, receive, unsettled

EVENTS = ROOT / "events"
queue_mode = pytest.mark.parametrize("handler", ["queue"], indirect=True)

#: The key as it would show anywhere: in clear, or merely base64-encoded (botocore and KMS put
#: plaintexts in JSON bodies that way).
KEY_FORMS = (
    CALLBACK_KEY,
    base64.b64encode(CALLBACK_KEY.encode()).decode(),
    base64.urlsafe_b64encode(CALLBACK_KEY.encode()).decode(),
)


# ---------------------------------------------------------------------- helpers


def _init_event(url: str, rollout_id: str, **changes: Any) -> Any:
    event = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body.update({"server_url": url, "rollout_id": rollout_id, **changes})
    assert body["api_key"] == CALLBACK_KEY
    event["body"] = json.dumps(body)
    return event


def _status_event(rollout_id: str) -> Any:
    event = load_event(EVENTS / "init.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/v1/rollout/{rollout_id}"
    event["requestContext"]["http"]["method"] = "GET"
    event.pop("body", None)
    return event


def _dead_letter_queue(sqs: Any, queue_url: str) -> str:
    policy = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])
    arn = json.loads(policy["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"]
    url: str = sqs.get_queue_url(QueueName=arn.rsplit(":", 1)[1])["QueueUrl"]
    return url


def _rollout_of(message: dict[str, Any]) -> str:
    rollout_id: str = json.loads(message["Body"])["rollout_id"]
    return rollout_id


def reports(traingate: TrainGateStandIn) -> dict[str, list[str]]:
    """The statuses TrainGate received, per rollout (the stand-in takes only the right key)."""
    return {rid: [r["status"] for r in got] for rid, got in traingate.completions.items() if got}


def _message_for(messages: list[dict[str, Any]], rollout_id: str) -> dict[str, Any]:
    return next(m for m in messages if _rollout_of(m) == rollout_id)


def _queued(handler: Any, resources: LocalResources, url: str, *ids: str) -> list[dict[str, Any]]:
    """Init each of ``ids`` (queue mode); the messages the inits sent."""
    for rollout_id in ids:
        call = invoke(handler, "ApiFunction", _init_event(url, rollout_id), timeout_seconds=29)
        assert call.result["statusCode"] == 202
    return receive(handler.runtime.clients.sqs, resources.queue_url)


def _texts(value: Any) -> Iterator[str]:
    """Every string in ``value``, bytes as they are and zlib-inflated where they inflate (the
    store compresses what it keeps)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, bytes | bytearray):
        yield bytes(value).decode("latin-1")
        with contextlib.suppress(zlib.error):
            yield zlib.decompress(bytes(value)).decode("latin-1")
    else:
        yield str(value)


def assert_no_key(where: str, value: Any) -> None:
    for text in _texts(value):
        for form in KEY_FORMS:
            assert form not in text, f"the callback key is in {where}"


def _table(handler: Any, resources: LocalResources) -> list[dict[str, Any]]:
    ddb = handler.runtime.clients.dynamodb
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": resources.table_name, "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _objects(handler: Any, resources: LocalResources) -> dict[str, bytes]:
    s3 = handler.runtime.clients.s3
    listed = s3.list_objects_v2(Bucket=resources.bucket).get("Contents", [])
    return {
        o["Key"]: s3.get_object(Bucket=resources.bucket, Key=o["Key"])["Body"].read()
        for o in listed
    }


class Logs:
    """What the functions logged: every record at the levels a deployment logs (the kit's own
    loggers at DEBUG, the libraries' at INFO), and what reached stdout and stderr."""

    def __init__(self, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]):
        caplog.set_level(logging.INFO)
        caplog.set_level(logging.DEBUG, logger="rollout_sdk")
        self._caplog, self._capfd = caplog, capfd

    def assert_no_key(self, handler: Any) -> None:
        # Each record as CloudWatch would get it (the handler's Powertools formatter).
        formatter = handler.logger.registered_formatter
        records = self._caplog.records
        assert_no_key("the logs", [formatter.format(r) for r in records])
        assert_no_key("the log messages", [r.getMessage() for r in records])
        assert_no_key("stdout and stderr", self._capfd.readouterr())


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> Logs:
    return Logs(caplog, capfd)


def _record(handler: Any, rollout_id: str) -> Any:
    runtime = handler.runtime
    return runtime.run(runtime.store.get(rollout_id, now=0))


def _open(handler: Any, sealed: str, rollout_id: str) -> str:
    runtime = handler.runtime
    opened: str = runtime.run(runtime.vault.open(sealed, rollout_id=rollout_id))
    return opened


@contextmanager
def kms_failing(handler: Any, operation: str) -> Iterator[None]:
    """Every KMS ``operation`` fails as a throttled KMS's would, while this lasts."""

    def fail(**_: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, operation
        )

    events = handler.runtime.clients.kms.meta.events
    events.register(f"before-call.kms.{operation}", fail)
    try:
        yield
    finally:
        events.unregister(f"before-call.kms.{operation}", fail)


def _old(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as a version of the kit from before sealing sent it: the key in clear."""
    body = {"rollout_id": _rollout_of(message), "attempt": 1, "api_key": CALLBACK_KEY}
    return {**message, "Body": json.dumps(body)}


@pytest.fixture
def fast_client(handler: Any) -> None:
    client = handler.runtime.settings.client
    client.retry_base_delay = 0.01
    client.retry_max_delay = 0.02


# ---------------------------------------------------------------------- queue mode


@queue_mode
def test_queue_mode_holds_the_key_in_clear_nowhere_users_can_read(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    fast_client: None,
    logs: Logs,
) -> None:
    traingate, url = standin
    sqs = handler.runtime.clients.sqs
    dead_letters = _dead_letter_queue(sqs, resources.queue_url)
    answers: list[Any] = []

    # Inits: a plain one, one whose request goes to S3, one whose callback will be parked, one
    # that will be dead-lettered, a duplicate (a second message), and a refused one (422).
    big = {"ground_truth": "42", "blob": os.urandom(150_000).hex()}
    for rollout_id, changes in [
        ("k-ok", {}),
        ("k-big", {"metadata": big}),
        ("k-parked", {}),
        ("k-dead", {}),
        ("k-ok", {}),
    ]:
        call = invoke(
            handler, "ApiFunction", _init_event(url, rollout_id, **changes), timeout_seconds=29
        )
        assert call.result["statusCode"] == 202 and call.dispatched == []
        answers.append(call.result)
    refused = invoke(
        handler, "ApiFunction", _init_event(url, "k-bad", server_url="ftp://x"), timeout_seconds=29
    )
    assert refused.result["statusCode"] == 422
    answers.append(refused.result)

    seen = receive(sqs, resources.queue_url)
    # (The duplicate may hand its rollout off again: one more message, or none.)
    assert sorted(set(map(_rollout_of, seen))) == ["k-big", "k-dead", "k-ok", "k-parked"]
    for message in seen:
        body = json.loads(message["Body"])
        assert "api_key" not in body
        assert _open(handler, body[SEALED_KEY_FIELD], body["rollout_id"]) == CALLBACK_KEY

    # One worker invocation: k-dead's rollout cannot be settled, k-parked's callback keeps
    # failing (parked, its key sealed in the record), the others complete.
    traingate.inject("completed", Fault(503, count=100, rollout_id="k-parked"))
    with unsettled(handler, "k-dead"):
        result = invoke(handler, "QueueWorkerFunction", batch(seen), timeout_seconds=900)
    answers.append(result.result)
    dead = _message_for(seen, "k-dead")
    assert result.result == {"batchItemFailures": [{"itemIdentifier": dead["MessageId"]}]}

    # SQS delivers k-dead twice more, then moves it to the dead-letter queue.
    sqs.change_message_visibility(
        QueueUrl=resources.queue_url, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )
    for _ in range(2):
        (again,) = receive(sqs, resources.queue_url, visibility=0)
        seen.append(again)
    assert receive(sqs, resources.queue_url, visibility=0) == []
    dead_lettered = receive(sqs, dead_letters)
    assert list(map(_rollout_of, dead_lettered)) == ["k-dead"]
    seen.extend(dead_lettered)
    reported = invoke(handler, "DeadLetterFunction", batch(dead_lettered), timeout_seconds=300)
    answers.append(reported.result)
    assert reported.result["rollouts"] == [{"rollout_id": "k-dead", "state": "DELIVERED"}]

    # What TrainGate got, with the key (the stand-in refuses any other): one report each.
    assert reports(traingate) == {
        "k-ok": ["COMPLETED"],
        "k-big": ["COMPLETED"],
        "k-dead": ["ERROR"],
    }
    parked = _record(handler, "k-parked")
    assert parked.state == RecordState.FINISHED and parked.next_attempt_at is not None
    assert _open(handler, parked.sealed_key, "k-parked") == CALLBACK_KEY

    # Every place an account user could read.
    for rid in ("k-ok", "k-big", "k-parked", "k-dead", "k-bad"):
        answers.append(
            invoke(handler, "ApiFunction", _status_event(rid), timeout_seconds=29).result
        )
    assert [a["statusCode"] for a in answers[-5:]] == [200, 200, 200, 200, 404]
    objects = _objects(handler, resources)
    assert objects, "the large request went to S3"
    assert_no_key("the SQS messages", seen)
    assert_no_key("the table", _table(handler, resources))
    assert_no_key("the payload bucket", objects)
    assert_no_key("the answers", answers)
    logs.assert_no_key(handler)


@queue_mode
def test_a_message_from_before_sealing_with_the_key_in_clear_still_runs(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    # An API function of an older version sent it during the upgrade: not lost.
    traingate, url = standin
    (sealed,) = _queued(handler, resources, url, "k-old")
    result = invoke(handler, "QueueWorkerFunction", batch([_old(sealed)]), timeout_seconds=900)
    assert result.result == {"batchItemFailures": []}
    assert reports(traingate) == {"k-old": ["COMPLETED"]}


@queue_mode
def test_an_old_dead_letter_with_the_key_in_clear_is_reported(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    _queued(handler, resources, url, "sample-rollout-0001")
    event = load_event(EVENTS / "dead-letter.json")  # the sample carries the old format
    assert '"api_key"' in event["Records"][0]["body"]
    invoke(handler, "DeadLetterFunction", event, timeout_seconds=300)
    assert reports(traingate) == {"sample-rollout-0001": ["ERROR"]}


@queue_mode
def test_a_sealed_key_kms_cannot_open_fails_the_message_so_sqs_delivers_it_again(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    messages = _queued(handler, resources, url, "k-fine", "k-locked")
    locked = _message_for(messages, "k-locked")
    with kms_failing(handler, "Decrypt"):
        first = invoke(handler, "QueueWorkerFunction", batch([locked]), timeout_seconds=900)
    assert first.result == {"batchItemFailures": [{"itemIdentifier": locked["MessageId"]}]}
    assert _record(handler, "k-locked").state == RecordState.ACCEPTED  # nothing ran
    assert reports(traingate) == {}
    # SQS delivers it again once KMS answers: it runs, once.
    again = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    assert again.result == {"batchItemFailures": []}
    assert reports(traingate) == {"k-locked": ["COMPLETED"], "k-fine": ["COMPLETED"]}


@queue_mode
def test_a_dead_letter_whose_key_cannot_be_opened_is_kept_until_it_opens(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    messages = _queued(handler, resources, url, "k-locked", "k-plain")
    # k-plain's message is an old one, with its key in clear: settled without KMS.
    event = batch([_message_for(messages, "k-locked"), _old(_message_for(messages, "k-plain"))])
    with kms_failing(handler, "Decrypt"), pytest.raises(StoreError, match="k-locked"):
        invoke(handler, "DeadLetterFunction", event, timeout_seconds=300)
    assert _record(handler, "k-locked").state == RecordState.ACCEPTED  # not reported keyless
    assert reports(traingate) == {"k-plain": ["ERROR"]}
    # SQS delivers the batch again: the key opens, k-locked is reported once, k-plain not again.
    result = invoke(handler, "DeadLetterFunction", event, timeout_seconds=300)
    assert {r["rollout_id"]: r["state"] for r in result.result["rollouts"]} == {
        "k-locked": "DELIVERED",
        "k-plain": "DELIVERED",
    }
    assert reports(traingate) == {"k-plain": ["ERROR"], "k-locked": ["ERROR"]}


@queue_mode
def test_a_key_that_cannot_be_opened_for_a_rollout_already_reported_lets_the_message_go(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    messages = _queued(handler, resources, url, "k-done")
    invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    with kms_failing(handler, "Decrypt"):
        again = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
        dead = invoke(handler, "DeadLetterFunction", batch(messages), timeout_seconds=300)
    assert again.result == {"batchItemFailures": []}
    assert dead.result == {"status": "settled", "rollouts": []}
    assert reports(traingate) == {"k-done": ["COMPLETED"]}


@queue_mode
def test_init_answers_503_and_keeps_nothing_when_the_key_cannot_be_sealed(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    _, url = standin
    with kms_failing(handler, "Encrypt"):
        failed = invoke(handler, "ApiFunction", _init_event(url, "k-unsealed"), timeout_seconds=29)
    assert failed.result["statusCode"] == 503
    assert "ThrottlingException" in json.loads(failed.result["body"])["detail"]
    assert _table(handler, resources) == []  # claim released: TrainGate's retry starts afresh
    assert receive(handler.runtime.clients.sqs, resources.queue_url) == []
    assert len(_queued(handler, resources, url, "k-unsealed")) == 1


def test_queue_mode_without_the_kms_key_is_refused_naming_the_variable() -> None:
    from examples.calculator.agent import agent_loop

    settings = load_settings(
        aws={"AGENT_LOOP": "m:a", "TABLE_NAME": "t", "HAND_OFF": "queue", "QUEUE_URL": "q"}
    )
    runtime = LambdaRuntime(agent_loop, settings=settings, clients=AwsClients())
    try:
        with pytest.raises(ConfigurationError, match="CALLBACK_KEY_KMS_KEY_ID"):
            _ = runtime.dispatcher
    finally:
        runtime.close()


def test_a_message_body_carries_the_key_sealed_and_old_bodies_still_parse() -> None:
    body = json.loads(message_body(Job("r", 2, api_key=CALLBACK_KEY), "c2VhbGVk"))
    assert body == {"rollout_id": "r", "attempt": 2, SEALED_KEY_FIELD: "c2VhbGVk"}
    queued = job_from_message(json.dumps(body))
    assert (queued.job, queued.sealed_api_key) == (Job("r", 2), "c2VhbGVk")
    assert CALLBACK_KEY not in repr(queued)
    old = job_from_message(json.dumps({"rollout_id": "r", "attempt": 1, "api_key": "k"}))
    assert (old.job.api_key, old.sealed_api_key) == ("k", None)
    for bad in (
        {"rollout_id": "r", SEALED_KEY_FIELD: 3},
        {"rollout_id": "r", SEALED_KEY_FIELD: ""},
        {"rollout_id": "r", SEALED_KEY_FIELD: "x", "api_key": CALLBACK_KEY},
    ):
        with pytest.raises(ValueError) as caught:
            job_from_message(json.dumps(bad))
        assert CALLBACK_KEY not in str(caught.value)


def test_the_functions_that_seal_or_open_queued_keys_may_use_the_kms_key() -> None:
    resources = load_template(ROOT / "template.yaml")["Resources"]

    def kms_grants(function: str) -> set[tuple[str, str | None]]:
        """Each KMS action on CallbackKeyKey, with the condition it is granted under (None:
        whenever the function exists)."""
        granted: set[tuple[str, str | None]] = set()
        for policy in resources[function]["Properties"]["Policies"]:
            for statement in policy["Statement"]:
                condition = None
                if "Fn::If" in statement:
                    condition, statement, _ = statement["Fn::If"]
                actions = statement["Action"]
                for action in [actions] if isinstance(actions, str) else actions:
                    if action.startswith("kms:"):
                        assert statement["Resource"] == {"Fn::GetAtt": "CallbackKeyKey.Arn"}
                        granted.add((action, condition))
        return granted

    # In queue mode at least (a grant in every mode would do too).
    assert kms_grants("ApiFunction") & {("kms:Encrypt", "UseQueue"), ("kms:Encrypt", None)}
    for function in ("QueueWorkerFunction", "DeadLetterFunction"):
        assert ("kms:Decrypt", None) in kms_grants(function)


# ---------------------------------------------------------------------- direct mode


def test_direct_mode_keeps_the_key_only_in_the_invocation_payload(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    logs: Logs,
) -> None:
    traingate, url = standin
    answers: list[Any] = []
    payloads: list[Any] = []
    for rid in ("d-run", "d-failed"):
        call = invoke(handler, "ApiFunction", _init_event(url, rid), timeout_seconds=29)
        assert call.result["statusCode"] == 202
        answers.append(call.result)
        payloads.extend(call.dispatched)
    # The payload is where the key travels (Lambda's own queue, then the failure record).
    assert [p["api_key"] for p in payloads] == [CALLBACK_KEY, CALLBACK_KEY]
    answers.append(invoke(handler, "WorkerFunction", payloads[0], timeout_seconds=900).result)
    failure = load_event(EVENTS / "worker-failure.json")
    failure["requestPayload"] = payloads[1]
    answers.append(invoke(handler, "WorkerFailureFunction", failure, timeout_seconds=300).result)
    assert reports(traingate) == {
        "d-run": ["COMPLETED"],
        "d-failed": ["ERROR"],
    }
    for rid in ("d-run", "d-failed"):
        answers.append(
            invoke(handler, "ApiFunction", _status_event(rid), timeout_seconds=29).result
        )
    assert_no_key("the table", _table(handler, resources))
    assert_no_key("the payload bucket", _objects(handler, resources))
    assert_no_key("the answers", answers)
    logs.assert_no_key(handler)


def test_the_functions_never_log_their_event_even_when_powertools_is_told_to(
    resources: LocalResources,
    template: dict[str, Any],
    standin: tuple[TrainGateStandIn, str],
    monkeypatch: pytest.MonkeyPatch,
    logs: Logs,
) -> None:
    # POWERTOOLS_LOGGER_LOG_EVENT=true would log every init request and worker event whole.
    _, url = standin
    env = function_environment(template, "ApiFunction", resources, LOOPBACK_TRAINGATE)
    env["POWERTOOLS_LOGGER_LOG_EVENT"] = "true"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    module = import_handler(env)
    try:
        call = invoke(module, "ApiFunction", _init_event(url, "l-1"), timeout_seconds=29)
        invoke(module, "WorkerFunction", call.dispatched[0], timeout_seconds=900)
        logs.assert_no_key(module)
    finally:
        module.runtime.close()
        sys.modules.pop("handler", None)
