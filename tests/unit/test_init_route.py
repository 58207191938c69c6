"""The lean init route against FastAPI's own: the same request to an app with the lean route and
to one without it gets the same status, headers and bytes, valid or not; and a valid init is
answered by the lean route, not by FastAPI's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from rollout_sdk.http import init_route
from rollout_sdk.http.app import create_app
from rollout_sdk.http.init_route import LeanInitRoute
from rollout_sdk.store.memory import MemoryStore

from .support import EchoAgent, RecordingDispatcher, request_body

pytestmark = pytest.mark.timeout(30)

KEY = "server-key-1"
JSON = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
INIT = "/v1/rollout/init"


def _app(*, lean: bool) -> FastAPI:
    app = create_app(
        EchoAgent(), store=MemoryStore(), dispatcher=RecordingDispatcher(), api_key=KEY
    )
    if not lean:
        # Starlette builds the middleware stack at the first request, from this list.
        app.user_middleware = [m for m in app.user_middleware if m.cls is not LeanInitRoute]  # type: ignore[comparison-overlap]
    return app


@pytest.fixture
async def clients() -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    base = "http://rollout.test"
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(lean=True)), base_url=base) as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(lean=False)), base_url=base) as b,
    ):
        yield a, b


def _valid(**overrides: Any) -> bytes:
    return json.dumps(request_body(**overrides)).encode()


#: Bodies in sequence (idempotent repeats and conflicts depend on what came before).
CASES: list[tuple[str, bytes]] = [
    ("valid", _valid()),
    ("the same again (idempotent)", _valid()),
    ("same id, other messages (conflict)", _valid(messages=[{"role": "user", "content": "x"}])),
    ("with tools and metadata", _valid(rollout_id="r-2", metadata={"k": [1, 2.5, None]})),
    ("idempotency key", _valid(rollout_id="r-3", idempotency_key="key-3")),
    ("idempotency key reused", _valid(rollout_id="r-4", idempotency_key="key-3")),
    ("missing rollout_id", json.dumps({"server_url": "http://127.0.0.1:1"}).encode()),
    ("wrong type", _valid(rollout_id="r-5", max_turns="many")),
    ("messages not a list", _valid(rollout_id="r-6", messages={"role": "user"})),
    ("not JSON", b"{not json"),
    ("empty body", b""),
    ("a JSON array", b"[1, 2]"),
    ("a JSON string", b'"init"'),
    ("NaN in a float field", _valid(rollout_id="r-7").replace(b"0.7", b"NaN")),
    ("invalid UTF-8", b'{"rollout_id": "\xff"}'),
    ("server_url refused", _valid(rollout_id="r-8", server_url="http://169.254.169.254/")),
    ("server_url not a URL", _valid(rollout_id="r-9", server_url="not a url")),
    ("extra field", _valid(rollout_id="r-10", surplus={"a": 1})),
]


async def test_every_answer_is_fastapis_own(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    lean, fastapi_route = clients
    statuses = set()
    for name, body in CASES:
        got = await lean.post(INIT, content=body, headers=JSON)
        want = await fastapi_route.post(INIT, content=body, headers=JSON)
        assert (got.status_code, got.content) == (want.status_code, want.content), name
        assert got.headers.multi_items() == want.headers.multi_items(), name
        statuses.add(got.status_code)
    # The table covers the 202, FastAPI's 422 and the error table's answers.
    assert {202, 409, 422} <= statuses


async def test_a_valid_init_is_answered_by_the_lean_route(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    lean, fastapi_route = clients
    parsed: list[str] = []
    original = init_route._parsed

    def counting(body: bytes) -> Any:
        request = original(body)
        parsed.append("valid" if request is not None else "refused")
        return request

    monkeypatch.setattr(init_route, "_parsed", counting)
    assert (await lean.post(INIT, content=_valid(), headers=JSON)).status_code == 202
    assert (await lean.post(INIT, content=b"[]", headers=JSON)).status_code == 422
    assert parsed == ["valid", "refused"]
    # The app it is compared with has no lean route: FastAPI answers it alone.
    assert (await fastapi_route.post(INIT, content=_valid(), headers=JSON)).status_code == 202
    assert parsed == ["valid", "refused"]


async def test_other_routes_and_methods_pass_through(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    lean, fastapi_route = clients
    for method, path in [
        ("GET", INIT),
        ("POST", INIT + "/"),
        ("GET", "/v1/rollout/nope"),
        ("GET", "/health"),
    ]:
        got = await lean.request(method, path, headers=JSON)
        want = await fastapi_route.request(method, path, headers=JSON)
        if path == "/health":  # each app is a process of its own: its own process_id
            assert got.status_code == want.status_code == 200
            assert _same_process(got.json()) == _same_process(want.json())
            continue
        assert (got.status_code, got.content) == (want.status_code, want.content), (method, path)


def _same_process(health: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in health.items() if k not in ("process_id", "instance_id")}


async def test_the_key_and_admission_still_come_first(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    lean, _ = clients
    assert (await lean.post(INIT, content=_valid())).status_code == 401
    no_json = {"Authorization": f"Bearer {KEY}", "Content-Type": "text/plain"}
    assert (await lean.post(INIT, content=_valid(), headers=no_json)).status_code == 415
