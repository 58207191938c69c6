"""Init's shape rules for ``server_url``, the keys' byte limits and the counts' range: in the model,
and through the app (422 naming the field, nothing stored, nothing dispatched)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from botocore.stub import Stubber
from pydantic import ValidationError

from rollout_sdk.errors import RecordTooLarge, StoreError
from rollout_sdk.http.app import create_app
from rollout_sdk.local.emulator import local_session
from rollout_sdk.protocol import (
    IDEMPOTENCY_KEY_MAX_BYTES,
    MAX_COUNT,
    ROLLOUT_ID_MAX_BYTES,
    ROLLOUT_ID_MAX_CHARS,
    STORE_KEY_MAX_BYTES,
    InitResponse,
    RolloutRequest,
)
from rollout_sdk.store.dynamodb import ROLLOUT_PREFIX, SLOT_PREFIX, DynamoDBStore
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RolloutRecord, idempotency_slot

from .support import EchoAgent, RecordingDispatcher, make_request, request_body

AUTH = {"Authorization": "Bearer k"}
FOUR = "\U0001f600"  # four bytes in UTF-8

#: An idempotency_key of exactly IDEMPOTENCY_KEY_MAX_BYTES bytes (509 x 4 + 3 = 2,039).
KEY_AT_LIMIT = FOUR * 509 + "abc"
#: A rollout_id of exactly ROLLOUT_ID_MAX_BYTES bytes: 256 four-byte characters.
ID_AT_LIMIT = FOUR * 256

#: server_url values refused, and a word the message must hold.
REFUSED_URLS = {
    "query": ("http://127.0.0.1:9000/admin/purge?x=", "query"),
    "empty-query": ("https://tg.test/?", "query"),
    "fragment": ("https://tg.test/base#x", "fragment"),
    "empty-fragment": ("https://tg.test#", "fragment"),
    "user-info": ("https://user:pass@tg.test/", "user info"),
    "user-only": ("https://user@tg.test/", "user info"),
    "newline": ("https://tg.test/a\nb", "control or whitespace"),
    "tab-in-host": ("https://tg.\ttest/", "control or whitespace"),
    "space": ("https://tg.test/a b", "control or whitespace"),
    "nul": ("https://tg.test/a\x00", "control or whitespace"),
    "zero-width": ("https://tg.test\u200b/", "control or whitespace"),
    "backslash": ("https://tg.test\\@evil.test/", "backslash"),
    "encoded-host": ("http://%31%32%37.0.0.1/", "percent-encoded"),
    "encoded-nul": ("https://tg.test/admin%00", "%00"),
    "encoded-query": ("https://tg.test/admin%3Fx=", "%3F"),
    "encoded-fragment": ("https://tg.test/admin%23", "%23"),
    "double-encoded": ("https://tg.test/admin%253F", "%25"),
    "ftp": ("ftp://tg.test", "http"),
    "no-host": ("http://", "host"),
}


def _refusal(field: str, **overrides: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        RolloutRequest.model_validate(request_body(**overrides))
    errors = caught.value.errors()
    assert [e["loc"] for e in errors] == [(field,)]
    return str(errors[0]["msg"])


# --------------------------------------------------------------------------- server_url


@pytest.mark.parametrize(("url", "word"), REFUSED_URLS.values(), ids=list(REFUSED_URLS))
def test_a_server_url_of_the_wrong_shape_is_refused_naming_the_fix(url: str, word: str) -> None:
    message = _refusal("server_url", server_url=url)
    assert "server_url" in message
    assert word in message


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        (" https://tg.test/prefix/ ", "https://tg.test/prefix"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("https://bücher.example/v", "https://bücher.example/v"),
        ("https://tg.test/a%2Fb", "https://tg.test/a%2Fb"),
        ("HTTPS://TG.test:443/p", "HTTPS://TG.test:443/p"),
    ],
)
def test_a_base_url_is_accepted(url: str, stored: str) -> None:
    assert make_request(server_url=url).server_url == stored


def test_the_suffix_stays_the_path_of_every_accepted_url() -> None:
    # What the refusals protect: the kit's fixed path is the end of the URL it calls.
    from urllib.parse import urlsplit

    from rollout_sdk.traingate.client import CHAT_PATH

    for url in ("https://tg.test/base", "http://[::1]:8080", "https://tg.test/a%2Fb"):
        called = urlsplit(make_request(server_url=url).server_url + CHAT_PATH)
        assert called.path.endswith(CHAT_PATH)
        assert (called.query, called.fragment) == ("", "")


# --------------------------------------------------------------------------- keys


def test_the_byte_limits_fit_the_store_keys_with_their_prefixes() -> None:
    longest_slot_prefix = len((SLOT_PREFIX + "key:").encode())
    assert longest_slot_prefix == len((SLOT_PREFIX + "rid:").encode())
    assert longest_slot_prefix + IDEMPOTENCY_KEY_MAX_BYTES == STORE_KEY_MAX_BYTES
    assert longest_slot_prefix + ROLLOUT_ID_MAX_BYTES <= STORE_KEY_MAX_BYTES
    assert len(ROLLOUT_PREFIX.encode()) + ROLLOUT_ID_MAX_BYTES <= STORE_KEY_MAX_BYTES
    # The character limit cannot outgrow the byte limit (UTF-8: at most 4 bytes a character).
    assert 4 * ROLLOUT_ID_MAX_CHARS <= ROLLOUT_ID_MAX_BYTES
    # And the slot is built from the request as the arithmetic says.
    request = make_request(rollout_id=ID_AT_LIMIT, idempotency_key=KEY_AT_LIMIT)
    assert len((SLOT_PREFIX + idempotency_slot(request)).encode()) == STORE_KEY_MAX_BYTES


def test_keys_at_their_byte_limits_are_accepted() -> None:
    assert len(KEY_AT_LIMIT.encode()) == IDEMPOTENCY_KEY_MAX_BYTES
    assert len(ID_AT_LIMIT.encode()) == ROLLOUT_ID_MAX_BYTES
    request = make_request(rollout_id=ID_AT_LIMIT, idempotency_key=KEY_AT_LIMIT)
    assert (request.rollout_id, request.idempotency_key) == (ID_AT_LIMIT, KEY_AT_LIMIT)


@pytest.mark.parametrize(
    "key",
    [FOUR * 1024, KEY_AT_LIMIT + "d", "é" * 1020],
    ids=["1024-four-byte-chars", "one-byte-over", "two-byte-chars"],
)
def test_an_idempotency_key_over_its_byte_limit_is_refused(key: str) -> None:
    assert len(key) <= 1024 < len(key.encode())
    message = _refusal("idempotency_key", idempotency_key=key)
    assert f"{len(key.encode())} bytes" in message
    assert f"limit is {IDEMPOTENCY_KEY_MAX_BYTES} bytes" in message


def test_a_rollout_id_one_byte_over_is_refused() -> None:
    # 1,025 bytes take at least 257 characters, so the character limit refuses it first.
    message = _refusal("rollout_id", rollout_id=ID_AT_LIMIT + "x")
    assert "256 characters" in message


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize("field", ["max_turns", "max_tokens_total"])
@pytest.mark.parametrize("value", [0, -5, MAX_COUNT + 1, 10**30])
def test_a_count_out_of_range_is_refused(field: str, value: int) -> None:
    _refusal(field, **{field: value})


@pytest.mark.parametrize("field", ["max_turns", "max_tokens_total"])
@pytest.mark.parametrize("value", [1, MAX_COUNT])
def test_a_count_in_range_is_accepted(field: str, value: int) -> None:
    assert getattr(make_request(**{field: value}), field) == value


# --------------------------------------------------------------------------- through the app


@pytest.fixture
async def app() -> AsyncIterator[tuple[httpx.AsyncClient, MemoryStore, RecordingDispatcher]]:
    store, dispatcher = MemoryStore(), RecordingDispatcher()
    built = create_app(EchoAgent(), api_key="k", store=store, dispatcher=dispatcher)
    transport = httpx.ASGITransport(app=built)
    async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as http:
        yield http, store, dispatcher


BAD_FIELDS = {
    **{f"server_url-{name}": {"server_url": url} for name, (url, _) in REFUSED_URLS.items()},
    "idempotency_key-bytes": {"idempotency_key": FOUR * 1024},
    "idempotency_key-one-byte-over": {"idempotency_key": KEY_AT_LIMIT + "d"},
    "rollout_id-one-byte-over": {"rollout_id": ID_AT_LIMIT + "x"},
    "max_turns-zero": {"max_turns": 0},
    "max_turns-negative": {"max_turns": -5},
    "max_tokens_total-huge": {"max_tokens_total": 10**30},
    "max_tokens_total-2**31": {"max_tokens_total": 2**31},
}


@pytest.mark.parametrize("overrides", BAD_FIELDS.values(), ids=list(BAD_FIELDS))
async def test_init_refuses_the_field_with_422_and_stores_nothing(
    app: tuple[httpx.AsyncClient, MemoryStore, RecordingDispatcher], overrides: dict[str, Any]
) -> None:
    http, store, dispatcher = app
    body = request_body(**overrides)
    answer = await http.post("/v1/rollout/init", json=body, headers=AUTH)
    assert answer.status_code == 422
    [field] = overrides
    assert [e["loc"] for e in answer.json()["detail"]] == [["body", field]]
    assert await store.get(body["rollout_id"], now=0) is None
    assert dispatcher.jobs == []


async def test_init_with_keys_at_their_byte_limits_is_stored_and_found(
    app: tuple[httpx.AsyncClient, MemoryStore, RecordingDispatcher],
) -> None:
    http, store, dispatcher = app
    body = request_body(rollout_id=ID_AT_LIMIT, idempotency_key=KEY_AT_LIMIT)
    answer = await http.post("/v1/rollout/init", json=body, headers=AUTH)
    assert answer.status_code == 202
    status = await http.get(f"/v1/rollout/{ID_AT_LIMIT}", headers=AUTH)
    assert status.status_code == 200
    assert status.json()["rollout_id"] == ID_AT_LIMIT
    stored = await store.get(ID_AT_LIMIT, now=0)
    assert stored is not None
    assert stored.slot == "key:" + KEY_AT_LIMIT
    assert len(dispatcher.jobs) == 1


async def test_the_status_of_an_id_no_init_could_store_is_404_without_a_store_call(
    app: tuple[httpx.AsyncClient, MemoryStore, RecordingDispatcher],
) -> None:
    http, store, _ = app
    looked_up: list[str] = []
    real_get = store.get

    async def get(rollout_id: str, *, now: float) -> Any:
        looked_up.append(rollout_id)
        return await real_get(rollout_id, now=now)

    store.get = get  # type: ignore[method-assign]
    for path in (f"/v1/rollout/{'x' * 3000}", f"/v1/rollout/{'x' * 3000}/cancel"):
        method = http.post if path.endswith("/cancel") else http.get
        answer = await method(path, headers=AUTH)
        assert answer.status_code == 404
        assert "at most 256 characters" in answer.json()["detail"]
    assert looked_up == []
    assert (await http.get("/v1/rollout/unknown", headers=AUTH)).status_code == 404
    assert looked_up == ["unknown"]


# --------------------------------------------------------------------------- DynamoDB's refusals
# AWS reports an item too large inside a transaction as a cancellation reason, which moto's
# server does not: these answers come from botocore's stub (tests/contract covers moto's).


def _cancelled(reason: dict[str, str]) -> Any:
    ddb = local_session().client("dynamodb", endpoint_url="http://127.0.0.1:9")
    stub = Stubber(ddb)
    stub.add_client_error(
        "transact_write_items",
        "TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons",
        modeled_fields={"CancellationReasons": [{"Code": "None"}, reason]},
    )
    stub.activate()
    return ddb


def _record() -> RolloutRecord:
    return RolloutRecord.new(
        make_request(), InitResponse(rollout_id="rollout-1"), now=1.0, ttl_seconds=60
    )


async def test_a_cancelled_create_for_an_item_too_large_is_record_too_large() -> None:
    reason = {
        "Code": "ValidationError",
        "Message": "Item size has exceeded the maximum allowed size",
    }
    store = DynamoDBStore("rollouts", client=_cancelled(reason))
    with pytest.raises(RecordTooLarge, match="Item size has exceeded"):
        await store.create(_record(), now=1.0)


async def test_a_cancelled_create_for_another_validation_error_stays_a_store_error() -> None:
    reason = {"Code": "ValidationError", "Message": "One or more parameter values were invalid"}
    store = DynamoDBStore("rollouts", client=_cancelled(reason))
    with pytest.raises(StoreError) as caught:
        await store.create(_record(), now=1.0)
    assert not isinstance(caught.value, RecordTooLarge)
