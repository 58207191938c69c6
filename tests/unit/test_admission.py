"""Bad input at init: every case a 4xx naming the field or the limit, nothing stored, no job.

Through ``httpx.ASGITransport`` with ``MemoryStore`` and the recording dispatcher; the body limit
also with a real chunked body (an async generator) and with Content-Length.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollout_sdk.engine.rules import check_server_url
from rollout_sdk.errors import ServerUrlRefused
from rollout_sdk.http.admission import AdmissionMiddleware, is_json_content_type
from rollout_sdk.http.app import create_app
from rollout_sdk.json_scan import Skeleton
from rollout_sdk.protocol import MAX_JSON_NESTING, json_size
from rollout_sdk.settings import KitSettings, RolloutSettings, load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
from testkit.asgi import http_scope

from .support import AppServer, EchoAgent, RecordingDispatcher, request_body, serve_app

KEY = "server-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
INIT = "/v1/rollout/init"
LIMIT = 64 * 1024  # the smallest body limit the setting allows


class Server(AppServer):
    async def post(
        self, content: bytes, *, content_type: str | None = "application/json", auth: bool = True
    ) -> httpx.Response:
        headers = {**(AUTH if auth else {})}
        if content_type is not None:
            headers["content-type"] = content_type
        return await self.http.post(INIT, content=content, headers=headers)

    def nothing_started(self) -> bool:
        return len(self.store) == 0 and self.dispatcher.jobs == []


def serve(settings: RolloutSettings | None = None) -> AsyncIterator[Server]:
    return serve_app(Server, api_key=KEY, settings=settings)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async for s in serve(load_settings(kit={"max_body_bytes": LIMIT})):
        yield s


def encoded(**overrides: Any) -> bytes:
    return json.dumps(request_body(**overrides)).encode()


def without(field: str) -> bytes:
    body = request_body()
    del body[field]
    return json.dumps(body).encode()


def locs(answer: httpx.Response) -> list[list[Any]]:
    detail = answer.json()["detail"]
    assert isinstance(detail, list), detail
    for entry in detail:
        assert entry["type"]
        assert entry["msg"]
    return [entry["loc"] for entry in detail]


# --------------------------------------------------------------------------- 422 naming the field


NESTED = "[" * (MAX_JSON_NESTING + 1) + "]" * (MAX_JSON_NESTING + 1)

FIELD_CASES: list[tuple[str, bytes, str]] = [
    ("missing-rollout_id", without("rollout_id"), "rollout_id"),
    ("missing-server_url", without("server_url"), "server_url"),
    ("missing-messages", without("messages"), "messages"),
    ("missing-completion_params", without("completion_params"), "completion_params"),
    ("rollout_id-number", encoded(rollout_id=5), "rollout_id"),
    ("rollout_id-null", encoded(rollout_id=None), "rollout_id"),
    ("rollout_id-empty", encoded(rollout_id=""), "rollout_id"),
    ("rollout_id-blank", encoded(rollout_id="  \t "), "rollout_id"),
    ("rollout_id-257", encoded(rollout_id="x" * 257), "rollout_id"),
    ("server_url-number", encoded(server_url=8080), "server_url"),
    ("server_url-ftp", encoded(server_url="ftp://traingate.test"), "server_url"),
    ("server_url-file", encoded(server_url="file:///etc/passwd"), "server_url"),
    ("server_url-no-scheme", encoded(server_url="traingate.test"), "server_url"),
    ("server_url-no-host", encoded(server_url="http://"), "server_url"),
    ("server_url-port-only", encoded(server_url="http://:8080/x"), "server_url"),
    ("server_url-bad-ipv6", encoded(server_url="http://[::1"), "server_url"),
    ("server_url-bad-port", encoded(server_url="http://traingate.test:99999"), "server_url"),
    ("messages-string", encoded(messages="hello"), "messages"),
    ("messages-of-strings", encoded(messages=["hello"]), "messages"),
    ("completion_params-list", encoded(completion_params=[]), "completion_params"),
    ("max_turns-word", encoded(max_turns="many"), "max_turns"),
    ("max_tokens_total-float", encoded(max_tokens_total=1.5), "max_tokens_total"),
    ("metadata-string", encoded(metadata="x"), "metadata"),
    ("api_key-number", encoded(api_key=123), "api_key"),
    ("idempotency_key-long", encoded(idempotency_key="k" * 1025), "idempotency_key"),
    # JSON that Python's json module takes but that could not be stored or sent on:
    ("nan", encoded().replace(b'"max_tokens": 64', b'"max_tokens": NaN'), "completion_params"),
    (
        "infinity",
        encoded().replace(b'"max_tokens": 64', b'"max_tokens": 1e400'),
        "completion_params",
    ),
    ("lone-surrogate", encoded().replace(b'"What is 2 + 2?"', b'"\\ud800"'), "messages"),
    ("surrogate-in-url", encoded().replace(b'"http://', b'"http://\\udfff'), "server_url"),
    ("surrogate-key", encoded(metadata={"k": 1}).replace(b'"k"', b'"\\udc00"'), "metadata"),
    (
        "too-deep",
        encoded(metadata={"x": 0}).replace(b'"x": 0', f'"x": {NESTED}'.encode()),
        "metadata",
    ),
]


@pytest.mark.parametrize(
    ("content", "field"), [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES]
)
async def test_an_invalid_field_is_422_naming_it(
    server: Server, content: bytes, field: str
) -> None:
    answer = await server.post(content)
    assert answer.status_code == 422, answer.text
    assert ["body", field] in [loc[:2] for loc in locs(answer)]
    assert server.nothing_started()


BODY_CASES: list[tuple[str, bytes, str]] = [
    ("malformed", b'{"rollout_id": "r1", ', "not valid JSON"),
    ("not-json-at-all", b"<xml/>", "not valid JSON"),
    ("array", b'[{"rollout_id": "r1"}]', "must be a JSON object"),
    ("string", b'"rollout-1"', "must be a JSON object"),
    ("number", b"42", "must be a JSON object"),
    ("null", b"null", "must be a JSON object"),
    ("empty", b"", "the body is empty"),
]


@pytest.mark.parametrize(
    ("content", "message"), [c[1:] for c in BODY_CASES], ids=[c[0] for c in BODY_CASES]
)
async def test_a_body_that_is_not_a_json_object_is_422_naming_the_body(
    server: Server, content: bytes, message: str
) -> None:
    answer = await server.post(content)
    assert answer.status_code == 422, answer.text
    (entry,) = answer.json()["detail"]
    assert entry["loc"][0] == "body"
    assert message in entry["msg"]
    assert server.nothing_started()


@pytest.mark.parametrize(
    "content",
    [b'{"rollout_id": "\xff\xfe"}', b"\x00not json", ("[" * 5000 + "]" * 5000).encode()],
    ids=["invalid-utf8", "nul-first", "nested-past-the-parser"],
)
async def test_a_body_the_json_parser_cannot_read_is_a_4xx(server: Server, content: bytes) -> None:
    # FastAPI answers 400 "There was an error parsing the body" when json.loads fails with
    # something other than a JSON syntax error (a decoding error, recursion).
    answer = await server.post(content)
    assert 400 <= answer.status_code < 500
    assert "body" in answer.text
    assert server.nothing_started()


async def test_a_422_never_echoes_the_input(server: Server) -> None:
    body = request_body(api_key="secret-callback-key", metadata={"x": "\ud800"})
    del body["messages"]
    answer = await server.post(json.dumps(body).encode())
    assert answer.status_code == 422
    assert "secret-callback-key" not in answer.text
    assert "input" not in answer.json()["detail"][0]


# --------------------------------------------------------------------------- 413 and 415


async def test_oversize_metadata_is_413_naming_the_limit_and_the_setting() -> None:
    settings = load_settings(max_metadata_size_bytes=2048)
    async for s in serve(settings):
        answer = await s.post(encoded(metadata={"blob": "x" * 2048}))
        assert answer.status_code == 413
        detail = answer.json()["detail"]
        assert "2048 bytes" in detail
        assert "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES" in detail
        assert s.nothing_started()


def body_of_size(size: int) -> bytes:
    """A valid init body of exactly ``size`` bytes (padded in metadata)."""
    base = len(encoded(metadata={"pad": ""}))
    body = encoded(metadata={"pad": "x" * (size - base)})
    assert len(body) == size
    return body


async def test_a_body_at_the_limit_passes_and_one_byte_more_is_413(server: Server) -> None:
    over = await server.post(body_of_size(LIMIT + 1))
    assert over.status_code == 413
    detail = over.json()["detail"]
    assert f"{LIMIT} bytes" in detail
    assert "ROLLOUT_SDK_MAX_BODY_BYTES" in detail
    assert server.nothing_started()
    assert (await server.post(body_of_size(LIMIT))).status_code == 202


# --------------------------------------------------------------------------- counts before parsing


def compact(**overrides: Any) -> bytes:
    return json.dumps(request_body(**overrides), separators=(",", ":")).encode()


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


MAX_BODY = KitSettings().max_body_bytes

#: Bodies within the default body limit that hold more than a default count allows: each is
#: refused before it is parsed, naming the limit and its variable.
COUNT_CASES: list[tuple[str, bytes, str, str]] = [
    ("1.8M-empty-messages", compact(messages=[{}] * 1_800_000), "MAX_JSON_VALUES", "1000000"),
    (
        "many-metadata-keys",
        compact(metadata={f"{i:x}": 0 for i in range(520_000)}),
        "MAX_JSON_VALUES",
        "1000000",
    ),
    (
        "many-tiny-strings",
        compact(messages=[{"role": "user", "content": [""] * 1_100_000}]),
        "MAX_JSON_VALUES",
        "1000000",
    ),
    ("many-numbers", compact(metadata={"ids": [7] * 1_100_000}), "MAX_JSON_VALUES", "1000000"),
    (
        "many-empty-arrays",
        compact(completion_params={"x": [[]] * 1_100_000}),
        "MAX_JSON_VALUES",
        "1000000",
    ),
    # 129 levels: the body, metadata and 127 arrays.
    ("deep", compact(metadata={"x": nested(127)}), "MAX_JSON_DEPTH", "128"),
    (
        "very-deep",
        b'{"metadata":' + b"[" * 400_000 + b"]" * 400_000 + b"}",
        "MAX_JSON_DEPTH",
        "128",
    ),
    (
        "many-messages",
        compact(messages=[{"role": "user", "content": "hi"}] * 10_001),
        "MAX_MESSAGES",
        "10000",
    ),
    (
        "many-tools",
        compact(completion_params={"tools": [{"type": "function"}] * 1001}),
        "MAX_TOOLS",
        "1000",
    ),
]


@pytest.mark.parametrize(
    ("content", "variable", "limit"),
    [c[1:] for c in COUNT_CASES],
    ids=[c[0] for c in COUNT_CASES],
)
async def test_a_body_over_a_count_is_413_naming_the_limit_before_it_is_parsed(
    content: bytes, variable: str, limit: str
) -> None:
    assert len(content) <= MAX_BODY
    async for s in serve(load_settings()):
        answer = await s.post(content)
        assert answer.status_code == 413, answer.text[:300]
        detail = answer.json()["detail"]
        assert f"ROLLOUT_SDK_{variable}" in detail
        assert f"the limit is {limit} " in detail
        assert s.nothing_started()


async def test_each_count_at_its_default_limit_is_accepted() -> None:
    at_limits = [
        compact(messages=[{"role": "user", "content": "hi"}] * 10_000),
        compact(completion_params={"tools": [{"type": "function"}] * 1000}),
    ]
    async for s in serve(load_settings(max_metadata_size_bytes=8 * 1024 * 1024)):
        values = compact(metadata={"ids": [7] * 100})
        values = compact(metadata={"ids": [7] * (100 + 1_000_000 - Skeleton(values).values())})
        assert Skeleton(values).values() == 1_000_000
        for rollout, content in enumerate([*at_limits, values]):
            answer = await s.post(content.replace(b'"rollout-1"', f'"r{rollout}"'.encode()))
            assert answer.status_code == 202, answer.text[:300]
        assert len(s.dispatcher.jobs) == 3


async def test_a_field_too_deep_within_the_body_depth_is_still_422_naming_it() -> None:
    # Deeper than 64 levels within a field is the field's rule; only deeper than the body's
    # limit is a count: 128 levels (the body, metadata, 126 arrays) is the field's 422.
    async for s in serve(load_settings()):
        answer = await s.post(compact(metadata={"x": nested(126)}))
        assert answer.status_code == 422, answer.text[:300]
        assert ["body", "metadata"] in [loc[:2] for loc in locs(answer)]
        assert s.nothing_started()


def real_init() -> dict[str, Any]:
    """An init as TrainGate sends a long one: 500 messages of chat, tool calls and tool
    results, and 1 MiB of metadata, most of it token ids."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful solver. " * 40}
    ]
    for turn in range(167):
        messages.append({"role": "user", "content": f"Step {turn}: what is {turn} * 17? " * 30})
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "multiply", "arguments": json.dumps({"a": turn, "b": 17})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": str(turn * 17)})
    messages = messages[:500]
    ids = [100_000 + (i * 7919) % 51_000 for i in range(150_000)]
    metadata: dict[str, Any] = {"dataset": "gsm8k", "row": 1234, "prompt_token_ids": ids}
    while (excess := json_size(metadata) - 1024 * 1024) > 0:
        del ids[-(excess // 7 + 1) :]  # an id and its comma: 7 bytes
    return request_body(messages=messages, metadata=metadata)


async def test_a_large_real_init_is_accepted() -> None:
    body = real_init()
    content = json.dumps(body).encode()
    assert len(body["messages"]) == 500
    assert 1024 * 1024 - 16 < json_size(body["metadata"]) <= 1024 * 1024
    async for s in serve(load_settings()):
        answer = await s.post(content)
        assert answer.status_code == 202, answer.text[:300]
        (job,) = s.dispatcher.jobs
        assert job.request is not None
        assert len(job.request.messages) == 500
        assert job.request.metadata["prompt_token_ids"] == body["metadata"]["prompt_token_ids"]


async def test_the_counts_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_SDK_MAX_MESSAGES", "100")
    async for s in serve():
        over = await s.post(compact(messages=[{"role": "user", "content": "hi"}] * 101))
        assert over.status_code == 413
        assert "ROLLOUT_SDK_MAX_MESSAGES" in over.json()["detail"]
        assert s.nothing_started()
        assert (
            await s.post(compact(messages=[{"role": "user", "content": "hi"}] * 100))
        ).status_code == 202


async def test_malformed_json_within_the_counts_is_still_the_parsers_422(server: Server) -> None:
    for content in [
        compact()[:-5],
        compact().replace(b'"rollout-1"', b'"rollout-1'),
        b'{"a":' + b"[" * 100,
    ]:
        answer = await server.post(content)
        assert answer.status_code == 422, answer.text
        assert "not valid JSON" in answer.json()["detail"][0]["msg"]
    assert server.nothing_started()


async def test_a_declared_oversize_body_is_refused_before_it_is_read(server: Server) -> None:
    read = False
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        read = True
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [
        (b"authorization", f"Bearer {KEY}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(10 * LIMIT).encode()),
    ]
    await server.app(http_scope(INIT, headers), receive, send)
    assert sent[0]["status"] == 413
    assert f"is {10 * LIMIT} bytes" in json.loads(sent[1]["body"])["detail"]
    assert not read
    assert server.nothing_started()


@pytest.mark.parametrize("declared", [b"9" * 5000, b" 70000 ", b"-1", b"abc", b"1e9"])
async def test_an_odd_content_length_is_never_a_5xx(server: Server, declared: bytes) -> None:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": encoded(), "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [
        (b"authorization", f"Bearer {KEY}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", declared),
    ]
    await server.app(http_scope(INIT, headers), receive, send)
    # A number over the limit is refused; anything else is ignored and the body counted.
    assert sent[0]["status"] == (413 if declared.strip().isdigit() else 202)


async def test_the_limits_apply_under_a_root_path() -> None:
    app = create_app(
        EchoAgent(),
        api_key=KEY,
        store=MemoryStore(),
        dispatcher=RecordingDispatcher(),
        settings=load_settings(kit={"max_body_bytes": LIMIT}),
    )
    transport = httpx.ASGITransport(app=app, root_path="/prod")
    async with httpx.AsyncClient(transport=transport, base_url="http://t/prod") as http:
        wrong_type = await http.post(
            INIT, content=encoded(), headers={**AUTH, "content-type": "text/plain"}
        )
        assert wrong_type.status_code == 415
        too_big = await http.post(INIT, content=body_of_size(LIMIT + 1), headers={**AUTH, **JSON})
        assert too_big.status_code == 413
        assert (
            await http.post(INIT, content=encoded(), headers={**AUTH, **JSON})
        ).status_code == 202


class Chunks:
    """A request body streamed from an async generator (no Content-Length: chunked)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.parts = [data[i : i + size] for i in range(0, len(data), size)]
        self.yielded = 0

    async def stream(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            self.yielded += 1
            yield part


async def test_a_chunked_body_is_cut_off_with_413_once_it_passes_the_limit(
    server: Server,
) -> None:
    chunks = Chunks(body_of_size(4 * LIMIT), 4096)
    answer = await server.http.post(INIT, content=chunks.stream(), headers={**AUTH, **JSON})
    assert "content-length" not in answer.request.headers
    assert answer.request.headers["transfer-encoding"] == "chunked"
    assert answer.status_code == 413
    assert "ROLLOUT_SDK_MAX_BODY_BYTES" in answer.json()["detail"]
    assert f"{LIMIT} bytes" in answer.json()["detail"]
    # Reading stopped at the chunk that passed the limit, long before the end.
    assert chunks.yielded == LIMIT // 4096 + 1
    assert chunks.yielded < len(chunks.parts)
    assert server.nothing_started()


async def test_a_chunked_body_under_the_limit_is_accepted(server: Server) -> None:
    chunks = Chunks(body_of_size(LIMIT), 1000)
    answer = await server.http.post(INIT, content=chunks.stream(), headers={**AUTH, **JSON})
    assert answer.status_code == 202
    assert chunks.yielded == len(chunks.parts)
    assert len(server.dispatcher.jobs) == 1


async def test_the_body_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_SDK_MAX_BODY_BYTES", str(LIMIT))
    async for s in serve():
        assert (await s.post(body_of_size(LIMIT + 1))).status_code == 413
        assert (await s.post(body_of_size(LIMIT))).status_code == 202


async def test_the_body_limit_covers_every_rollout_post_and_nothing_else(server: Server) -> None:
    big = b"x" * (LIMIT + 1)
    other = await server.http.post("/v1/rollout/r1/cancel", content=big, headers=AUTH)
    assert other.status_code == 413
    health = await server.http.post("/health", content=big)
    assert health.status_code == 405  # not a rollout route: the router answers, not the limit


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/jsonp",
        "application/+json",
        "json",
    ],
)
async def test_a_non_json_content_type_is_415_naming_the_expected_type(
    server: Server, content_type: str | None
) -> None:
    answer = await server.post(encoded(), content_type=content_type)
    assert answer.status_code == 415
    assert "application/json" in answer.json()["detail"]
    assert server.nothing_started()


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        'Application/JSON;charset="UTF-8"',
        "application/vnd.traingate.rollout+json",
    ],
)
async def test_json_content_types_are_accepted(server: Server, content_type: str) -> None:
    answer = await server.post(encoded(), content_type=content_type)
    assert answer.status_code == 202


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, False),
        (b"", False),
        (b"application/json", True),
        (b"APPLICATION/JSON ; Charset=utf8", True),
        (b"application/json; version=2", True),
        (b"application/problem+json", True),
        (b"application/json; charset=utf-16", False),
        (b"text/json", False),
        (b"application/json-seq", False),
        (b"application/\xffjson", False),
    ],
)
def test_is_json_content_type(raw: bytes | None, expected: bool) -> None:
    assert is_json_content_type(raw) is expected


# --------------------------------------------------------------------------- key before body


@pytest.mark.parametrize(
    "header",
    [
        None,
        b"Bearer wrong",
        b"Bearer caf\xc3\xa9",
        b"Bearer \xff",
        b"\x80\x81",
        b"Bearer " + KEY.encode() + b"\x7f",
    ],
    ids=["missing", "wrong", "utf8", "latin1", "binary", "control"],
)
async def test_the_key_is_checked_before_size_type_and_json(
    server: Server, header: bytes | None
) -> None:
    auth = [] if header is None else [(b"authorization", header)]
    big = body_of_size(2 * LIMIT)
    requests: list[tuple[list[tuple[bytes, bytes]], Any]] = [
        ([(b"content-type", b"application/json")], big),  # Content-Length over the limit
        ([(b"content-type", b"application/json")], Chunks(big, 4096).stream()),  # chunked
        ([(b"content-type", b"text/plain")], encoded()),
        ([(b"content-type", b"application/json")], b"{not json"),
    ]
    for headers, content in requests:
        answer = await server.http.post(INIT, content=content, headers=auth + headers)
        assert answer.status_code == 401, answer.text
        assert "rollout_id" not in answer.text
    assert server.nothing_started()


# --------------------------------------------------------------------------- server_url policy


def kit(**values: Any) -> OutboundPolicy:
    """The local server's policy under these settings (loopback and private allowed)."""
    return OutboundPolicy.from_settings(KitSettings(**values), where=Reach.PRIVATE)


LINK_LOCAL = [
    "http://169.254.169.254/latest/meta-data",
    "http://169.254.0.1:8080",
    "https://169.254.255.255.",
    "http://[fe80::1]/",
    "http://[FE80::a:b:c:d]:9000",
    "http://[febf::1]",
    "http://[fe80::1%25eth0]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[fd00:ec2::254]/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://169%2E254%2E169%2E254/",
]


@pytest.mark.parametrize("url", LINK_LOCAL)
def test_link_local_addresses_are_refused_by_default(url: str) -> None:
    with pytest.raises(ServerUrlRefused, match="ROLLOUT_SDK_ALLOW_LINK_LOCAL"):
        check_server_url(url, kit())
    check_server_url(url, kit(allow_link_local=True))


@pytest.mark.parametrize(
    "url",
    [
        "http://169.255.0.1",
        "http://169.253.255.255",
        "http://10.0.0.1",
        "http://127.0.0.1:9000",
        "http://[::1]",
        "https://traingate.example/prefix",
        "http://169.254.example.test",  # a name is not resolved (see check_server_url)
        "http://cafe.be",
    ],
)
def test_other_addresses_and_names_pass_without_an_allowlist(url: str) -> None:
    check_server_url(url, kit())


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:8080/base", True),
        ("http://traingate.example", True),
        ("https://TRAINGATE.example./v1", True),
        ("http://[::1]:80", True),
        ("http://[0:0::1]", True),
        ("http://evil.test", False),
        ("http://127.0.0.1.evil.test", False),
        ("http://traingate.example.evil.test", False),
        ("http://127.0.0.2", False),
        ("http://localhost", False),
    ],
)
def test_the_allowlist_admits_only_its_hosts(url: str, allowed: bool) -> None:
    settings = kit(allowed_server_hosts=" 127.0.0.1, TrainGate.Example ,[::1]")
    if allowed:
        check_server_url(url, settings)
    else:
        with pytest.raises(ServerUrlRefused, match="ROLLOUT_SDK_ALLOWED_SERVER_HOSTS"):
            check_server_url(url, settings)


def test_an_allowlisted_link_local_address_still_needs_the_link_local_switch() -> None:
    settings = kit(allowed_server_hosts="169.254.169.254")
    with pytest.raises(ServerUrlRefused, match="ROLLOUT_SDK_ALLOW_LINK_LOCAL"):
        check_server_url("http://169.254.169.254", settings)
    check_server_url(
        "http://169.254.169.254", kit(allowed_server_hosts="169.254.169.254", allow_link_local=True)
    )


async def test_a_refused_server_url_is_422_at_server_url_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROLLOUT_SDK_ALLOWED_SERVER_HOSTS", "127.0.0.1,169.254.169.254")
    async for s in serve():
        for url, setting in [
            ("http://traingate.test/base", "ROLLOUT_SDK_ALLOWED_SERVER_HOSTS"),
            ("http://169.254.169.254/latest", "ROLLOUT_SDK_ALLOW_LINK_LOCAL"),
        ]:
            answer = await s.post(encoded(server_url=url))
            assert answer.status_code == 422
            (entry,) = answer.json()["detail"]
            assert entry["loc"] == ["body", "server_url"]
            assert entry["type"] == "value_error"
            assert "server_url" in entry["msg"]
            assert setting in entry["msg"]
        assert s.nothing_started()
        accepted = await s.post(encoded(server_url="http://127.0.0.1:9000/tg"))
        assert accepted.status_code == 202


async def test_link_local_is_accepted_when_the_setting_allows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROLLOUT_SDK_ALLOW_LINK_LOCAL", "true")
    async for s in serve():
        answer = await s.post(encoded(server_url="http://169.254.10.10:8080"))
        assert answer.status_code == 202


class RecordingApp:
    """An ASGI app that records each body chunk as it reads it, then answers 200."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def post_chunked(app: ASGIApp, chunks: Chunks, path: str = INIT) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as http:
        return await http.post(path, content=chunks.stream(), headers=JSON)


async def test_a_streamed_body_over_the_limit_never_reaches_the_app() -> None:
    inner = RecordingApp()
    chunks = Chunks(b"x" * (3 * LIMIT), 4096)
    answer = await post_chunked(AdmissionMiddleware(inner, max_body_bytes=LIMIT), chunks)
    assert answer.status_code == 413
    assert answer.json() == {
        "detail": f"the request body is larger than that; the limit is {LIMIT} bytes "
        "(raise it with ROLLOUT_SDK_MAX_BODY_BYTES)"
    }
    assert inner.chunks == []  # not even part of the body
    assert chunks.yielded == LIMIT // 4096 + 1


@pytest.mark.parametrize("path", [INIT, "/v1/rollout/r1/cancel"])
async def test_a_streamed_body_within_the_limit_reaches_the_app_whole(path: str) -> None:
    inner = RecordingApp()
    data = bytes(range(256)) * (LIMIT // 256)
    answer = await post_chunked(
        AdmissionMiddleware(inner, max_body_bytes=LIMIT), Chunks(data, 1000), path
    )
    assert answer.status_code == 200
    assert inner.body == data
