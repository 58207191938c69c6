"""The AWS path's guarantees, through handler.py and moto's server."""

from __future__ import annotations

import json
import os
from typing import Any

from botocore.exceptions import ClientError

from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import CALLBACK_KEY, ROOT


def just_under_the_metadata_limit(limit: int = 1024 * 1024) -> dict[str, Any]:
    """Metadata whose compact UTF-8 JSON is a few bytes under ``limit``, and incompressible."""
    metadata: dict[str, Any] = {"ground_truth": "42", "blob": ""}
    overhead = len(json.dumps(metadata, separators=(",", ":")).encode())
    metadata["blob"] = os.urandom(limit).hex()[: limit - overhead - 16]
    size = len(json.dumps(metadata, separators=(",", ":")).encode())
    assert limit - 32 < size < limit
    return metadata


def _init_event(url: str, **changes: Any) -> Any:
    event = load_event(ROOT / "events" / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, **changes)
    event["body"] = json.dumps(body)
    return event


def _raw_items(handler: Any, resources: LocalResources) -> list[dict[str, Any]]:
    ddb = handler.runtime.clients.dynamodb
    items: list[dict[str, Any]] = ddb.scan(TableName=resources.table_name)["Items"]
    return items


def test_a_failed_hand_off_answers_503_and_releases_the_claim(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    _, url = standin
    lam = handler.runtime.clients.lambda_

    def throttled(**_: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}}, "Invoke"
        )

    lam.meta.events.register("before-call.lambda.Invoke", throttled)
    failed = invoke(handler, "ApiFunction", _init_event(url), timeout_seconds=29)
    lam.meta.events.unregister("before-call.lambda.Invoke", throttled)
    assert failed.result["statusCode"] == 503
    detail = json.loads(failed.result["body"])["detail"]
    assert "TooManyRequestsException" in detail and "retry" in detail
    assert _raw_items(handler, resources) == []  # claim released: nothing half-written

    # TrainGate's retry of the same init dispatches afresh.
    retried = invoke(handler, "ApiFunction", _init_event(url), timeout_seconds=29)
    assert retried.result["statusCode"] == 202
    assert len(retried.dispatched) == 1


def test_the_callback_key_is_never_stored(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    _, url = standin
    invoke(handler, "ApiFunction", _init_event(url), timeout_seconds=29)
    invoke(
        handler, "WorkerFunction", load_event(ROOT / "events" / "worker.json"), timeout_seconds=900
    )
    items = _raw_items(handler, resources)
    assert len(items) == 2  # the rollout record and its idempotency slot
    for item in items:
        assert CALLBACK_KEY.encode() not in json.dumps(item, default=repr).encode()
    record = handler.runtime.loop.run_until_complete(
        handler.runtime.store.get("sample-rollout-0001", now=0)
    )
    assert record is not None
    assert "api_key" not in record.request


def test_a_request_larger_than_a_dynamodb_item_completes_through_s3(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    # Incompressible metadata just under the 1 MiB default limit, plus a long history.
    metadata = just_under_the_metadata_limit()
    history = [{"role": "user", "content": f"earlier turn {i} " + "x" * 200} for i in range(200)]
    messages = [*history, {"role": "user", "content": "What is 6 * 7?"}]
    event = _init_event(url, metadata=metadata, messages=messages)
    assert len(event["body"]) > 1024 * 1024
    accepted = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert accepted.result["statusCode"] == 202
    s3 = handler.runtime.clients.s3
    stored = s3.list_objects_v2(Bucket=resources.bucket).get("KeyCount", 0)
    assert stored >= 1  # the request went to the payload bucket, a pointer to the item
    ran = invoke(handler, "WorkerFunction", accepted.dispatched[0], timeout_seconds=900)
    assert ran.result["state"] == "DELIVERED"
    report = traingate.completions["sample-rollout-0001"][0]
    assert report["status"] == "COMPLETED"
    assert report["reward"] == 1.0
    assert len(report["final_messages"]) == len(messages) + 3


def test_metadata_over_the_limit_is_413_naming_the_setting(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    _, url = standin
    event = _init_event(url, metadata={"blob": "x" * (1024 * 1024 + 1)})
    call = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert call.result["statusCode"] == 413
    assert "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES" in json.loads(call.result["body"])["detail"]
    assert call.dispatched == []
    assert _raw_items(handler, resources) == []


def test_a_large_request_and_a_large_response_fit_together(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    # Each about 220 KB compressed: alone under an item's 400 KB, together over it.
    traingate, url = standin
    history = [{"role": "user", "content": os.urandom(1100).hex()} for _ in range(100)]
    messages = [*history, {"role": "user", "content": "What is 6 * 7?"}]
    accepted = invoke(
        handler, "ApiFunction", _init_event(url, messages=messages), timeout_seconds=29
    )
    assert accepted.result["statusCode"] == 202
    ran = invoke(handler, "WorkerFunction", accepted.dispatched[0], timeout_seconds=900)
    assert ran.result["state"] == "DELIVERED"
    report = traingate.completions["sample-rollout-0001"][0]
    assert report["status"] == "COMPLETED"
    assert len(report["final_messages"]) == len(messages) + 3
