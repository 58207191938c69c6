"""HandOff=queue: init sends to SQS, one worker invocation runs a batch, partial-batch failures,
redelivery runs nothing twice, dead letters are reported once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import CALLBACK_KEY, ROOT

EVENTS = ROOT / "events"
queue_mode = pytest.mark.parametrize("handler", ["queue"], indirect=True)


def _init(handler: Any, url: str, rollout_id: str) -> None:
    event = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, rollout_id=rollout_id)
    event["body"] = json.dumps(body)
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 202
    assert call.dispatched == []  # no Lambda invoke: the queue carries it


def receive(sqs: Any, queue_url: str, *, visibility: int | None = None) -> list[dict[str, Any]]:
    """Every message visible now, with all its attributes: each once (hidden for the queue's
    visibility timeout), or with ``visibility=0`` one receive's worth, left visible."""
    extra = {} if visibility is None else {"VisibilityTimeout": visibility}
    messages: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            **extra,
        ).get("Messages", [])
        messages.extend(got)
        if not got or visibility == 0:
            return messages


def _receive(handler: Any, resources: LocalResources) -> list[dict[str, Any]]:
    return receive(handler.runtime.clients.sqs, resources.queue_url)


def batch(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The SQS event Lambda would build from ``messages``."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "eventSource": "aws:sqs",
            }
            for m in messages
        ]
    }


@contextmanager
def unsettled(handler: Any, rollout_id: str) -> Iterator[None]:
    """The worker cannot settle ``rollout_id`` (its store fails) while this lasts."""
    worker = handler.runtime.worker
    real_run = worker.run

    async def run(job: Any, **kwargs: Any) -> Any:
        if job.rollout_id == rollout_id:
            raise RuntimeError("store unreachable")
        return await real_run(job, **kwargs)

    worker.run = run
    try:
        yield
    finally:
        worker.run = real_run


@queue_mode
def test_a_batch_runs_together_in_one_invocation_and_each_rollout_reports_once(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    ids = [f"q-{i}" for i in range(5)]
    for rid in ids:
        _init(handler, url, rid)
    messages = _receive(handler, resources)
    assert sorted(json.loads(m["Body"])["rollout_id"] for m in messages) == ids
    # The callback key travels sealed with the stack's KMS key, never in clear.
    bodies = [json.loads(m["Body"]) for m in messages]
    assert all(
        "api_key" not in body and CALLBACK_KEY not in m["Body"]
        for body, m in zip(bodies, messages, strict=True)
    )
    vault = handler.runtime.vault
    opened = [
        handler.runtime.run(vault.open(b["sealed_api_key"], rollout_id=b["rollout_id"]))
        for b in bodies
    ]
    assert opened == [CALLBACK_KEY] * len(ids)
    result = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    assert result.result == {"batchItemFailures": []}
    assert {rid: len(traingate.completions[rid]) for rid in ids} == dict.fromkeys(ids, 1)
    assert all(traingate.completions[rid][0]["status"] == "COMPLETED" for rid in ids)
    # SQS delivers the batch again: nothing runs twice, nothing is sent twice.
    again = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    assert again.result == {"batchItemFailures": []}
    assert traingate.chat_calls == 2 * len(ids)
    assert all(len(traingate.completions[rid]) == 1 for rid in ids)


@queue_mode
def test_a_malformed_message_is_dropped_and_the_rest_of_the_batch_runs(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    _init(handler, url, "good")
    event = batch(_receive(handler, resources))
    event["Records"].append({"messageId": "bad", "body": "{not json"})
    result = invoke(handler, "QueueWorkerFunction", event, timeout_seconds=900)
    assert result.result == {"batchItemFailures": []}  # retrying cannot fix it
    assert len(traingate.completions["good"]) == 1


@queue_mode
def test_a_rollout_the_kit_cannot_settle_is_reported_as_a_batch_item_failure(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    _, url = standin
    _init(handler, url, "fine")
    _init(handler, url, "doomed")
    messages = _receive(handler, resources)
    with unsettled(handler, "doomed"):
        result = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    doomed = next(
        m["MessageId"] for m in messages if json.loads(m["Body"])["rollout_id"] == "doomed"
    )
    assert result.result == {"batchItemFailures": [{"itemIdentifier": doomed}]}


@queue_mode
def test_a_dead_letter_is_reported_once_as_error(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    _init(handler, url, "sample-rollout-0001")
    event = load_event(EVENTS / "dead-letter.json")
    result = invoke(handler, "DeadLetterFunction", event, timeout_seconds=300)
    assert result.result == {
        "status": "settled",
        "rollouts": [{"rollout_id": "sample-rollout-0001", "state": "DELIVERED"}],
    }
    (report,) = traingate.completions["sample-rollout-0001"]
    assert report["status"] == "ERROR"
    assert "failed 3 times (dead-letter queue)" in report["error_message"]
    invoke(handler, "DeadLetterFunction", event, timeout_seconds=300)
    assert len(traingate.completions["sample-rollout-0001"]) == 1


def test_the_sample_queue_event_runs_through_the_queue_worker(
    handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    event = load_event(EVENTS / "init.json")
    body = json.loads(event["body"])
    body["server_url"] = url
    event["body"] = json.dumps(body)
    assert invoke(handler, "ApiFunction", event, timeout_seconds=29).result["statusCode"] == 202
    result = invoke(
        handler, "QueueWorkerFunction", load_event(EVENTS / "queue-batch.json"), timeout_seconds=900
    )
    assert result.result == {"batchItemFailures": []}
    assert traingate.completions["sample-rollout-0001"][0]["status"] == "COMPLETED"
