"""The app through ``httpx.ASGITransport``: init, idempotency, status codes, server-key auth."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from rollout_sdk.errors import AgentLoopValidationError
from rollout_sdk.http.app import create_app
from rollout_sdk.http.auth import parse_authorization
from rollout_sdk.settings import RolloutSettings, load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState

from .support import AppServer, EchoAgent, RecordingDispatcher, request_body, serve_app

KEY = "server-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}
INIT = "/v1/rollout/init"


class Server(AppServer):
    async def init(self, headers: dict[str, str] | None = None, **overrides: Any) -> httpx.Response:
        return await self.http.post(
            INIT, json=request_body(**overrides), headers=AUTH if headers is None else headers
        )


def serve(
    *,
    api_key: str | None = KEY,
    api_keys: tuple[str, ...] = (),
    settings: RolloutSettings | None = None,
    root_path: str = "",
) -> AsyncIterator[Server]:
    return serve_app(
        Server, root_path=root_path, api_key=api_key, api_keys=api_keys, settings=settings
    )


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async for s in serve():
        yield s


@pytest.fixture
async def open_server() -> AsyncIterator[Server]:
    """No server key configured."""
    async for s in serve(api_key=None):
        yield s


async def claim_like_a_worker(server: Server, rollout_id: str = "rollout-1") -> None:
    """Move the record to RUNNING, as the worker's claim does."""
    now = time.time()
    accepted = await server.store.get(rollout_id, now=now)
    assert accepted is not None
    moved = await server.store.claim(
        rollout_id, attempt=1, lease_until=now + 60, expires_at=accepted.expires_at, now=now
    )
    assert moved.applied


# --------------------------------------------------------------------------- init


async def test_init_answers_202_with_tools_and_dispatches_one_job(server: Server) -> None:
    answer = await server.init(api_key="cb-key")
    assert answer.status_code == 202
    body = answer.json()
    assert body["rollout_id"] == "rollout-1"
    (tool,) = body["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "add"
    assert tool["function"]["description"] == "Add two numbers."
    assert tool["function"]["strict"] is False
    props = tool["function"]["parameters"]["properties"]
    assert props["mode"] == {"type": "string", "enum": ["exact", "round"]}
    assert props["b"] == {"type": "number"}  # no "description": null, no "enum": null
    assert "null" not in answer.text
    (job,) = server.dispatcher.jobs
    assert (job.rollout_id, job.attempt, job.api_key) == ("rollout-1", 1, "cb-key")


async def test_the_job_carries_inits_validated_models_as_stored(server: Server) -> None:
    await server.init(api_key="cb-key")
    (job,) = server.dispatcher.jobs
    record = await server.store.get("rollout-1", now=0)
    assert record is not None
    assert job.request is not None
    assert job.request == record.rollout_request("cb-key")
    assert job.init_response is not None
    assert job.init_response == record.init_response_model()


async def test_init_writes_an_accepted_record_without_the_callback_key(server: Server) -> None:
    await server.init(api_key="cb-secret")
    record = await server.store.get("rollout-1", now=0)
    assert record is not None
    assert record.state == RecordState.ACCEPTED
    assert "cb-secret" not in json.dumps(record.to_dict())


async def test_duplicate_identical_init_gets_identical_body_and_no_second_job(
    server: Server,
) -> None:
    first = await server.init()
    await claim_like_a_worker(server)
    second = await server.init()
    assert (first.status_code, second.status_code) == (202, 202)
    assert second.content == first.content
    assert len(server.dispatcher.jobs) == 1


async def test_duplicate_of_an_unclaimed_rollout_hands_it_off_again_with_the_same_job(
    server: Server,
) -> None:
    # The first hand-off may yet fail; the duplicate answered 202, so it must make sure a
    # worker gets the rollout. The worker's claim lets only one of the jobs run.
    await server.init(api_key="old-callback-key")
    second = await server.init(api_key="rotated-callback-key")
    assert second.status_code == 202
    first_job, second_job = server.dispatcher.jobs
    assert (first_job.rollout_id, first_job.attempt) == (second_job.rollout_id, second_job.attempt)
    assert second_job.api_key == "rotated-callback-key"


async def test_request_differing_only_in_api_key_is_the_same_request(server: Server) -> None:
    first = await server.init(api_key="old-callback-key")
    await claim_like_a_worker(server)
    second = await server.init(api_key="rotated-callback-key")
    assert second.status_code == 202
    assert second.content == first.content
    assert len(server.dispatcher.jobs) == 1


async def test_same_idempotency_key_different_request_is_409_naming_fields(
    server: Server,
) -> None:
    first = await server.init(rollout_id="a", idempotency_key="k")
    second = await server.init(
        rollout_id="b", idempotency_key="k", messages=[{"role": "user", "content": "other"}]
    )
    assert first.status_code == 202
    assert second.status_code == 409
    body = second.json()
    assert body["fields"] == ["messages", "rollout_id"]
    assert "messages" in body["detail"]
    assert "idempotency_key 'k'" in body["detail"]
    assert "a new idempotency_key and its own rollout_id" in body["detail"]
    assert len(server.dispatcher.jobs) == 1


async def test_same_rollout_id_without_key_different_request_is_409(server: Server) -> None:
    await server.init()
    second = await server.init(max_turns=3)
    assert second.status_code == 409
    assert second.json()["fields"] == ["max_turns"]
    detail = second.json()["detail"]
    assert "rollout_id 'rollout-1'" in detail
    # The advice is what works: a rollout_id of its own (a new idempotency_key would be
    # another 409, the rollout_id being taken).
    assert "a rollout_id of its own" in detail and "idempotency_key" not in detail
    assert (await server.init(idempotency_key="new", max_turns=3)).status_code == 409
    assert (await server.init(rollout_id="rollout-2", max_turns=3)).status_code == 202


async def test_same_rollout_id_under_another_idempotency_key_is_409(server: Server) -> None:
    assert (await server.init(idempotency_key="k1")).status_code == 202
    second = await server.init(idempotency_key="k2")
    assert second.status_code == 409
    assert second.json()["fields"] == ["rollout_id"]
    assert len(server.dispatcher.jobs) == 1


async def test_same_rollout_id_with_and_without_key_is_409(server: Server) -> None:
    assert (await server.init()).status_code == 202
    assert (await server.init(idempotency_key="k")).status_code == 409
    assert len(server.dispatcher.jobs) == 1


async def test_explicit_key_equal_to_another_rollouts_id_does_not_collide(server: Server) -> None:
    first = await server.init(rollout_id="r1")
    second = await server.init(rollout_id="r2", idempotency_key="r1")
    third = await server.init(rollout_id="r3", idempotency_key="rid:r1")
    assert [a.status_code for a in (first, second, third)] == [202, 202, 202]
    assert [j.rollout_id for j in server.dispatcher.jobs] == ["r1", "r2", "r3"]


async def test_unknown_fields_are_ignored(server: Server) -> None:
    answer = await server.init(future_field={"x": 1})
    assert answer.status_code == 202


async def test_metadata_over_the_limit_is_413_naming_the_variable() -> None:
    settings = load_settings(max_metadata_size_bytes=2048)
    async for s in serve(settings=settings):
        too_big = await s.init(metadata={"blob": "x" * 2048})
        assert too_big.status_code == 413
        assert "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES" in too_big.json()["detail"]
        assert s.dispatcher.jobs == []
        assert await s.store.get("rollout-1", now=0) is None
        fits = await s.init(metadata={"blob": "x" * 1900})
        assert fits.status_code == 202


async def test_metadata_limit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES", "1024")
    async for s in serve():
        assert (await s.init(metadata={"blob": "é" * 600})).status_code == 413  # 1200 bytes
        assert (await s.init(metadata={"blob": "e" * 600})).status_code == 202


async def test_dispatch_failure_is_503_and_releases_the_record(server: Server) -> None:
    server.dispatcher.fail_next = 1
    failed = await server.init()
    assert failed.status_code == 503
    assert failed.headers["retry-after"] == "1"
    assert "retry the same init" in failed.json()["detail"]
    assert await server.store.get("rollout-1", now=0) is None
    retried = await server.init()
    assert retried.status_code == 202
    assert len(server.dispatcher.jobs) == 1


async def test_get_tools_raising_is_500_with_the_message(server: Server) -> None:
    answer = await server.init(metadata={"tools_fail": True})
    assert answer.status_code == 500
    detail = answer.json()["detail"]
    assert "RuntimeError" in detail
    assert "tool catalogue unavailable" in detail
    assert server.dispatcher.jobs == []


@pytest.mark.parametrize(
    "overrides",
    [
        {"rollout_id": ""},
        {"rollout_id": "   "},
        {"rollout_id": "x" * 257},
        {"server_url": "ftp://traingate.test"},
        {"server_url": "http://"},
        {"server_url": "traingate.test"},
        {"messages": "not a list"},
        {"max_turns": "many"},
    ],
    ids=["empty-id", "blank-id", "257-id", "ftp", "no-host", "no-scheme", "messages", "turns"],
)
async def test_invalid_body_is_422(server: Server, overrides: dict[str, Any]) -> None:
    answer = await server.init(**overrides)
    assert answer.status_code == 422
    assert server.dispatcher.jobs == []


@pytest.mark.parametrize("missing", ["rollout_id", "server_url", "messages", "completion_params"])
async def test_missing_required_field_is_422(server: Server, missing: str) -> None:
    body = request_body()
    del body[missing]
    answer = await server.http.post(INIT, json=body, headers=AUTH)
    assert answer.status_code == 422
    assert missing in answer.text


async def test_not_json_is_422(server: Server) -> None:
    answer = await server.http.post(
        INIT, content=b"{not json", headers={**AUTH, "content-type": "application/json"}
    )
    assert answer.status_code == 422


async def test_256_char_rollout_id_and_trailing_slash_are_accepted(server: Server) -> None:
    answer = await server.init(rollout_id="x" * 256, server_url="https://tg.test/prefix/")
    assert answer.status_code == 202
    record = await server.store.get("x" * 256, now=0)
    assert record is not None
    assert record.request["server_url"] == "https://tg.test/prefix"


async def test_create_app_rejects_an_invalid_agent_loop() -> None:
    class Undocumented(EchoAgent):
        name = "undocumented"

        def get_tools(self, request: Any) -> list[Any]:
            return [{"type": "function", "function": {"name": "t"}}]

    with pytest.raises(AgentLoopValidationError, match="MISSING_FUNCTION_DESCRIPTION"):
        create_app(Undocumented(), store=MemoryStore(), dispatcher=RecordingDispatcher())


async def test_create_app_warns_about_ignored_v1_arguments() -> None:
    with pytest.warns(UserWarning, match="server_host"):
        create_app(EchoAgent(), server_host="0.0.0.0", dispatcher=RecordingDispatcher())
    with pytest.warns(UserWarning, match="bogus"):
        create_app(EchoAgent(), bogus=1, dispatcher=RecordingDispatcher())


async def test_create_app_max_concurrent_and_ttl_apply() -> None:
    app = create_app(EchoAgent(), max_concurrent=3, record_ttl_seconds=120)
    services = app.state.services
    assert services.settings.server.max_concurrent_rollouts == 3
    assert services.settings.server.record_ttl_seconds == 120
    assert services.dispatcher.max_concurrent == 3


# --------------------------------------------------------------------------- auth


async def test_key_is_checked_before_the_body(server: Server) -> None:
    garbage = await server.http.post(
        INIT,
        content=b"\x00not json at all",
        headers={"Authorization": "Bearer wrong", "content-type": "application/json"},
    )
    assert garbage.status_code == 401
    no_key = await server.http.post(INIT, json={"nonsense": True})
    assert no_key.status_code == 401
    assert "rollout_id" not in no_key.text  # nothing learnt about the schema
    with_key = await server.http.post(INIT, json={"nonsense": True}, headers=AUTH)
    assert with_key.status_code == 422


@pytest.mark.parametrize(
    "header",
    [
        None,
        b"",
        b"Bearer",
        b"Bearer ",
        b"Bearer wrong-key",
        b"Basic " + KEY.encode(),
        b"Basic x",
        b"Bearer " + KEY.encode() + b"x",
        b"Bearer " + KEY.encode()[:-1],
        b"Bearer " + KEY.encode() + b" extra",
        b"Bearer \xff\xfe" + KEY.encode(),
        b"Bearer caf\xc3\xa9",
        b"Bearer " + KEY.encode() + b"\x00",
    ],
)
async def test_bad_authorization_is_401(server: Server, header: bytes | None) -> None:
    headers = [] if header is None else [(b"authorization", header)]
    answer = await server.http.post(INIT, json=request_body(), headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert server.dispatcher.jobs == []


@pytest.mark.parametrize("header", [f"Bearer {KEY}", f"bearer {KEY}", f"BEARER  {KEY} ", KEY])
async def test_accepted_authorization_forms(server: Server, header: str) -> None:
    answer = await server.init(headers={"Authorization": header})
    assert answer.status_code == 202


async def test_rotation_accepts_every_configured_key() -> None:
    async for s in serve(api_key="old", api_keys=("new", "newer")):
        for i, key in enumerate(("old", "new", "newer")):
            ok = await s.init(headers={"Authorization": f"Bearer {key}"}, rollout_id=f"r{i}")
            assert ok.status_code == 202
        assert (await s.init(headers={"Authorization": "Bearer other"})).status_code == 401


async def test_api_keys_alone_enable_auth() -> None:
    async for s in serve(api_key=None, api_keys=("k",)):
        assert (await s.init(headers={})).status_code == 401
        assert (await s.init(headers={"Authorization": "Bearer k"})).status_code == 202


async def test_no_key_configured_means_init_is_open(open_server: Server) -> None:
    assert (await open_server.init(headers={})).status_code == 202


async def test_platform_health(server: Server) -> None:
    assert (await server.http.get("/platform/health")).status_code == 401
    wrong = await server.http.get("/platform/health", headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401
    right = await server.http.get("/platform/health", headers=AUTH)
    assert right.status_code == 200
    assert _v1_part(right.json()) == {
        "status": "healthy",
        "agent_loop": "echo",
        "active_rollouts": 0,
        "completed_rollouts": 0,
    }


async def test_platform_health_is_404_without_a_key(open_server: Server) -> None:
    assert (await open_server.http.get("/platform/health")).status_code == 404
    assert (await open_server.http.get("/platform/health", headers=AUTH)).status_code == 404


async def test_health_needs_no_key_and_counts(server: Server) -> None:
    server.dispatcher.active_count = 4
    server.dispatcher.completed_count = 9
    answer = await server.http.get("/health")
    assert answer.status_code == 200
    body = answer.json()
    assert _v1_part(body) == {
        "status": "healthy",
        "agent_loop": "echo",
        "active_rollouts": 4,
        "completed_rollouts": 9,
    }
    # osmosis-ai 0.3.8's part of the one answer (RolloutClient.wait_idle reads it).
    assert body["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 4}
    assert body["process_id"] and body["instance_id"]
    again = (await server.http.get("/health")).json()
    assert again["process_id"] == body["process_id"]  # the same process, the same id


def _v1_part(body: dict[str, Any]) -> dict[str, Any]:
    """v1's fields of /health (the rest is osmosis-ai 0.3.8's, and which wires it serves)."""
    assert body["protocols"] == ["v1"]  # a server of the agent loop alone
    others = ("instance_id", "process_id", "lifecycle", "protocols")
    return {k: v for k, v in body.items() if k not in others}


async def test_key_is_required_under_a_root_path() -> None:
    # uvicorn --root-path or an API stage prefix: ASGI's path then starts with root_path.
    async for s in serve(root_path="/prod"):
        assert (await s.init(headers={})).status_code == 401
        assert (await s.http.get("/platform/health")).status_code == 401
        assert s.dispatcher.jobs == []
        assert (await s.init()).status_code == 202
        assert (await s.http.get("/platform/health", headers=AUTH)).status_code == 200
        assert (await s.http.get("/health")).status_code == 200


async def test_platform_health_is_404_under_a_root_path_without_a_key() -> None:
    async for s in serve(api_key=None, root_path="/prod"):
        assert (await s.http.get("/platform/health")).status_code == 404
        assert (await s.init(headers={})).status_code == 202


async def test_docs_can_be_turned_off() -> None:
    app = create_app(EchoAgent(), dispatcher=RecordingDispatcher(), docs=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://rollout.test"
    ) as http:
        assert (await http.get("/openapi.json")).status_code == 404
        assert (await http.get("/docs")).status_code == 404


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        (b"", None),
        (b"Bearer abc", b"abc"),
        (b"bearer   abc  ", b"abc"),
        (b"abc", b"abc"),
        (b"Basic abc", None),
        (b"Bearer \x80", None),
        (b"Bearer a\tb", None),
    ],
)
def test_parse_authorization(raw: bytes | None, expected: bytes | None) -> None:
    assert parse_authorization(raw) == expected


async def test_a_blank_idempotency_key_is_no_key(server: Server) -> None:
    first = await server.init(rollout_id="a", idempotency_key="")
    second = await server.init(rollout_id="b", idempotency_key="  ")
    assert (first.status_code, second.status_code) == (202, 202)  # no collision on ""
    assert len(server.dispatcher.jobs) == 2


async def test_an_idempotency_key_over_1024_characters_is_422_naming_the_field(
    server: Server,
) -> None:
    answer = await server.init(idempotency_key="k" * 1025)
    assert answer.status_code == 422
    assert "idempotency_key" in answer.text
    assert server.dispatcher.jobs == []


def test_the_callback_key_is_not_in_a_requests_repr() -> None:
    from .support import make_request

    request = make_request(api_key="secret-callback-key")
    assert "secret-callback-key" not in repr(request)
    assert "secret-callback-key" not in str(request)
