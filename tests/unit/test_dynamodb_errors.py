"""The DynamoDB store's one translation of botocore's failures (store/dynamodb_errors.py), row by
row: each row's exception type, and what it carries or says."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from rollout_sdk.errors import (
    ConditionFailed,
    RecordTooLarge,
    ScanDenied,
    StoreError,
    TransactionCancelled,
)
from rollout_sdk.store.dynamodb_errors import s3_translated, translate, translated
from rollout_sdk.store.record import RolloutRecord

pytestmark = pytest.mark.timeout(10)

TABLE = "rollouts"
ITEM_TOO_LARGE = "Item size has exceeded the maximum allowed size"
RECORD = RolloutRecord(
    rollout_id="r-1", slot="rid:r-1", fingerprint="f", request={}, init_response={}
)


def client_error(code: str, message: str = "said", **extra: Any) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, **extra}, "Op")  # type: ignore[typeddict-item]


def test_a_failed_condition_carries_the_old_item_and_names_the_operation() -> None:
    old = {"pk": {"S": "rollout#r-1"}}
    error = translate(client_error("ConditionalCheckFailedException", Item=old), "update", TABLE)
    assert type(error) is ConditionFailed
    assert error.item == old
    assert str(error) == (
        "DynamoDB update on table 'rollouts' failed: ConditionalCheckFailedException: said"
    )


def test_a_cancelled_transaction_carries_its_reasons() -> None:
    reasons = [{"Code": "ConditionalCheckFailed"}, {"Code": "None"}]
    exc = client_error("TransactionCanceledException", CancellationReasons=reasons)
    for creating in (None, RECORD):  # a create's cancellation for no size is a lost race too
        error = translate(exc, "create", TABLE, creating=creating)
        assert type(error) is TransactionCancelled
        assert error.reasons == reasons


@pytest.mark.parametrize(
    "exc",
    [
        client_error("ValidationException", ITEM_TOO_LARGE),
        client_error(
            "ValidationException",
            "One or more parameter values were invalid: Size of hashkey has exceeded the "
            "maximum size limit of2048 bytes",
        ),
        client_error(
            "TransactionCanceledException",
            CancellationReasons=[
                {"Code": "None"},
                {"Code": "ValidationError", "Message": ITEM_TOO_LARGE},
            ],
        ),
    ],
    ids=["item", "key", "cancelled-for-size"],
)
def test_a_size_refusal_at_create_is_record_too_large_and_elsewhere_a_store_error(
    exc: ClientError,
) -> None:
    error = translate(exc, "create", TABLE, creating=RECORD)
    assert type(error) is RecordTooLarge
    assert "refused the record of rollout 'r-1' for its size" in str(error)
    assert "exceeded" in str(error)  # DynamoDB's own words
    later = translate(exc, "update", TABLE)
    assert not isinstance(later, RecordTooLarge)
    assert isinstance(later, StoreError)


def test_another_validation_error_at_create_stays_a_store_error() -> None:
    exc = client_error("ValidationException", "The provided key element does not match the schema")
    error = translate(exc, "create", TABLE, creating=RECORD)
    assert type(error) is StoreError
    assert "ValidationException: The provided key element" in str(error)


def test_access_denied_is_scan_denied_only_on_the_backfill_scan() -> None:
    exc = client_error("AccessDeniedException", "not authorized to perform: dynamodb:Scan")
    denied = translate(exc, "backfill of the due index", TABLE, scanning=True)
    assert type(denied) is ScanDenied
    assert str(denied) == (
        "DynamoDB backfill of the due index (Scan) on table 'rollouts' failed: "
        "AccessDeniedException: not authorized to perform: dynamodb:Scan"
    )
    assert type(translate(exc, "get", TABLE)) is StoreError


@pytest.mark.parametrize(
    "code", ["ThrottlingException", "ProvisionedThroughputExceededException", "InternalServerError"]
)
def test_throttling_and_the_rest_are_a_store_error_naming_the_operation(code: str) -> None:
    error = translate(client_error(code, "slow down"), "query of the due index", TABLE)
    assert type(error) is StoreError
    assert str(error) == (
        f"DynamoDB query of the due index on table 'rollouts' failed: {code}: slow down"
    )


def test_a_botocore_error_is_a_store_error_naming_the_operation() -> None:
    with pytest.raises(StoreError) as raised, translated("get", TABLE):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    assert type(raised.value) is StoreError
    assert str(raised.value).startswith(
        "DynamoDB get on table 'rollouts' failed: EndpointConnectionError: "
    )
    assert isinstance(raised.value.__cause__, EndpointConnectionError)


def test_the_context_raises_the_translation_from_the_original() -> None:
    original = client_error("ConditionalCheckFailedException")
    with pytest.raises(ConditionFailed) as raised, translated("update", TABLE):
        raise original
    assert raised.value.__cause__ is original


def test_an_s3_failure_is_a_store_error_naming_the_object() -> None:
    with pytest.raises(StoreError) as raised, s3_translated("S3 put of k in 'b'"):
        raise client_error("AccessDenied", "no")
    assert str(raised.value).startswith("S3 put of k in 'b' failed: ")
