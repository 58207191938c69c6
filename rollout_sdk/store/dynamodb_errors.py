"""How botocore's failures become the kit's, for the DynamoDB store: the one translation.

Nothing above the DynamoDB store sees botocore. Every call it makes to DynamoDB runs inside
:func:`translated`, every call to its S3 bucket inside :func:`s3_translated`, and
:func:`translate` is the table:

====================================================  ================================================
botocore raises                                       the store raises
====================================================  ================================================
``ConditionalCheckFailedException``                   :class:`~rollout_sdk.errors.ConditionFailed`, holding the item as
                                                      it was (``ALL_OLD``): a guard refused; the
                                                      caller turns it into its outcome
``ValidationException`` refusing a key's or an        :class:`~rollout_sdk.errors.RecordTooLarge`
item's size, at create                                (413: the init's content, no retry changes it)
``TransactionCanceledException``                      at create, RecordTooLarge when a reason refuses
                                                      an item's size; else :class:`~rollout_sdk.errors.TransactionCancelled`, holding
                                                      the reasons (a lost race, for the caller)
``AccessDeniedException`` on the backfill's Scan      :class:`~rollout_sdk.errors.ScanDenied` (the
                                                      grant exists only with BackfillDueIndex=true)
anything else: throttling (``Throttling...``,         :class:`~rollout_sdk.errors.StoreError` naming
``ProvisionedThroughputExceeded...``), a size         the operation, the table and DynamoDB's code
refusal after create, ``AccessDenied...``             and message (503: a retry may succeed)
elsewhere, a ``BotoCoreError``
====================================================  ================================================

S3 failures (a large value's object) are StoreError naming the object.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from rollout_sdk.errors import (
    ConditionFailed,
    RecordTooLarge,
    ScanDenied,
    StoreError,
    TransactionCancelled,
)

if TYPE_CHECKING:
    from rollout_sdk.store.record import RolloutRecord

#: What DynamoDB says when a key or an item is over its size limit, as a ValidationException
#: ("Item size has exceeded the maximum allowed size", "One or more parameter values were invalid:
#: Size of hashkey has exceeded the maximum size limit of2048 bytes") or as a cancelled
#: transaction's ValidationError reason (its item-size refusals). Other validation errors (a
#: table whose key schema is not the kit's, say) are the deployment's, and stay StoreError.
_SIZE_REFUSAL = re.compile(r"\bsize\b.*\bexceeded\b", re.IGNORECASE | re.DOTALL)


def _size_refusal(code: object, message: object) -> str | None:
    """DynamoDB's message when an error (``code``, ``message``) refuses a key or item size."""
    if code in ("ValidationException", "ValidationError") and isinstance(message, str):
        return message if _SIZE_REFUSAL.search(message) else None
    return None


def _too_large(record: RolloutRecord, message: str) -> RecordTooLarge:
    return RecordTooLarge(
        f"DynamoDB refused the record of rollout {record.rollout_id[:64]!r} for its size "
        f"({message}); a key (rollout_id, idempotency_key) fits in 2,048 bytes with the kit's "
        "prefix and an item in 400 KB, so this init cannot be stored as it is"
    )


def failure(action: str, table: str, exc: Exception) -> StoreError:
    """The plain StoreError: DynamoDB's ``action`` on ``table`` failed, with what it said."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        detail = f"{error.get('Code', 'ClientError')}: {error.get('Message', '')}"
    else:
        detail = f"{type(exc).__name__}: {exc}"
    return StoreError(f"DynamoDB {action} on table {table!r} failed: {detail}")


def translate(
    exc: ClientError | BotoCoreError,
    action: str,
    table: str,
    *,
    creating: RolloutRecord | None = None,
    scanning: bool = False,
) -> StoreError | RecordTooLarge:
    """``exc``, raised by DynamoDB's ``action`` on ``table``, as the store raises it (the
    module's table). ``creating``: the record a create writes (size refusals are its own);
    ``scanning``: the call is the backfill's Scan."""
    if not isinstance(exc, ClientError):
        return failure(action, table, exc)
    error = exc.response.get("Error", {})
    code = error.get("Code")
    plain = failure(action, table, exc)
    if code == "ConditionalCheckFailedException":
        old = cast("Mapping[str, Any] | None", exc.response.get("Item"))
        return ConditionFailed(str(plain), old)
    if creating is not None:
        refusal = _size_refusal(code, error.get("Message"))
        if refusal is not None:
            return _too_large(creating, refusal)
    if code == "TransactionCanceledException":
        reasons = cast("list[Any]", exc.response.get("CancellationReasons") or [])
        for reason in reasons:
            refusal = _size_refusal(reason.get("Code"), reason.get("Message"))
            if creating is not None and refusal is not None:
                return _too_large(creating, refusal)
        return TransactionCancelled(str(plain), reasons)
    if scanning and code == "AccessDeniedException":
        return ScanDenied(str(failure(f"{action} (Scan)", table, exc)))
    return plain


@contextmanager
def translated(
    action: str,
    table: str,
    *,
    creating: RolloutRecord | None = None,
    scanning: bool = False,
) -> Iterator[None]:
    """Run a DynamoDB call; botocore's failures leave as :func:`translate` says."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, action, table, creating=creating, scanning=scanning) from exc


@contextmanager
def s3_translated(what: str) -> Iterator[None]:
    """Run an S3 call (``what``: the call and its object); a failure becomes StoreError."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise StoreError(f"{what} failed: {exc}") from exc
