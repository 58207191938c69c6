"""The re-drive bench's counter (:mod:`testkit.dynamo_reads`): requests by operation, and the
items Scans and Queries read and returned, from botocore's hooks on a stubbed client."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from rollout_sdk.local.emulator import local_session
from testkit.dynamo_reads import Counted, DynamoReads, describe

TABLE = "rollouts"


def client() -> Any:
    # The emulator's session: fake credentials; the stub answers, so nothing is sent.
    from botocore.config import Config

    return local_session().client(
        "dynamodb",
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )


def test_scans_and_queries_add_up_their_scanned_and_returned_counts() -> None:
    ddb = client()
    reads = DynamoReads()
    detach = reads.attach(ddb)
    with Stubber(ddb) as stub:
        stub.add_response("scan", {"Items": [], "Count": 2, "ScannedCount": 1000})
        stub.add_response("scan", {"Items": [], "Count": 0, "ScannedCount": 20})
        stub.add_response("query", {"Items": [], "Count": 7, "ScannedCount": 7})
        stub.add_response("get_item", {})
        stub.add_response("update_item", {})
        stub.add_client_error("update_item", "ConditionalCheckFailedException")
        ddb.scan(TableName=TABLE)
        ddb.scan(TableName=TABLE)
        ddb.query(TableName=TABLE, KeyConditionExpression="pk = :p")
        ddb.get_item(TableName=TABLE, Key={"pk": {"S": "rollout#a"}})
        ddb.update_item(TableName=TABLE, Key={"pk": {"S": "rollout#a"}})
        with pytest.raises(ddb.exceptions.ConditionalCheckFailedException):
            ddb.update_item(TableName=TABLE, Key={"pk": {"S": "rollout#a"}})
    counted = reads.take()
    # A refused conditional write is a request answered like any other.
    assert counted.requests == {"Scan": 2, "Query": 1, "GetItem": 1, "UpdateItem": 2}
    assert (counted.scanned, counted.returned, counted.total) == (1027, 9, 6)
    assert counted.errors == {}
    assert counted.describe() == "Scan 2, UpdateItem 2, GetItem 1, Query 1"
    # take() starts again; after detach nothing more is counted.
    assert reads.take() == Counted()
    detach()
    with Stubber(ddb) as stub:
        stub.add_response("scan", {"Items": [], "Count": 1, "ScannedCount": 5})
        ddb.scan(TableName=TABLE)
    assert reads.take() == Counted()


def test_a_request_that_gets_no_answer_is_counted_apart() -> None:
    ddb = client()
    reads = DynamoReads()
    reads.attach(ddb)

    def no_answer(**_: Any) -> None:
        raise RuntimeError("connection reset")

    ddb.meta.events.register("before-send.dynamodb.GetItem", no_answer)
    with pytest.raises(RuntimeError):
        ddb.get_item(TableName=TABLE, Key={"pk": {"S": "rollout#a"}})
    counted = reads.take()
    assert (counted.requests, counted.errors) == ({}, {"GetItem": 1})
    assert counted.to_json()["request_errors"] == {"GetItem": 1}


def test_describe_orders_by_count_then_name() -> None:
    assert describe({}) == "none"
    assert describe({"GetItem": 10, "Scan": 3, "BatchGetItem": 10}) == (
        "BatchGetItem 10, GetItem 10, Scan 3"
    )
