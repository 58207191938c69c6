"""A local server closed unless opened on purpose: the public bind, the Host check over real
HTTP (DNS rebinding), /docs behind the key, and v1's ``serve_agent_loop`` rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout_sdk import serve_agent_loop
from rollout_sdk.errors import ServeError
from rollout_sdk.settings import reset_settings
from testkit.bodies import calculator_body
from testkit.processes import ServerProcess

pytestmark = pytest.mark.integration

AGENT = "examples.calculator.agent:agent_loop"
REBIND = "rebind.attacker.example"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``uvicorn.run`` was called with; it serves nothing here."""
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append({"app": app, **kw}))
    monkeypatch.delenv("ROLLOUT_SDK_SERVER_KEY", raising=False)
    return calls


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5"])
def test_serve_refuses_a_public_bind_without_a_key(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str], host: str
) -> None:
    from rollout_sdk.local.cli import main

    assert main(["serve", "--agent", AGENT, "--store", "memory", "--host", host]) == 2
    error = capsys.readouterr().err
    assert "--api-key" in error and "--allow-unauthenticated" in error, error
    assert served == []


def test_serve_opens_a_public_bind_with_a_key_or_the_opt_out(
    served: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rollout_sdk.local.cli import main

    argv = ["serve", "--agent", AGENT, "--store", "memory", "--host", "0.0.0.0"]
    assert main([*argv, "--allow-unauthenticated"]) == 0
    assert "open to every machine" in capsys.readouterr().err
    monkeypatch.setenv("ROLLOUT_SDK_SERVER_KEY", "a-key")
    reset_settings()  # read the key from the environment again
    assert main(argv) == 0
    assert [call["host"] for call in served] == ["0.0.0.0", "0.0.0.0"]


def test_serve_collects_garbage_less_often_while_it_serves_and_puts_the_threshold_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    import uvicorn

    from rollout_sdk.local.cli import main
    from rollout_sdk.local.server import GC_YOUNG_THRESHOLD

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.append(gc.get_threshold()))
    assert main(["serve", "--agent", AGENT, "--store", "memory"]) == 0
    assert seen == [(max(before[0], GC_YOUNG_THRESHOLD), *before[1:])]
    assert gc.get_threshold() == before
    # A process that set a higher threshold of its own keeps it.
    gc.set_threshold(GC_YOUNG_THRESHOLD * 2, *before[1:])
    try:
        assert main(["serve", "--agent", AGENT, "--store", "memory"]) == 0
        assert seen[-1][0] == GC_YOUNG_THRESHOLD * 2
        # One that turned automatic collection off keeps it off.
        gc.set_threshold(0, *before[1:])
        assert main(["serve", "--agent", AGENT, "--store", "memory"]) == 0
        assert seen[-1][0] == 0
    finally:
        gc.set_threshold(*before)


def _init(server: ServerProcess, host: str | None, n: int, key: str | None = None) -> Any:
    headers = {"Host": host} if host else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = calculator_body(f"rebind-{n}", "http://127.0.0.1:9")
    return httpx.post(f"{server.url}/v1/rollout/init", json=body, headers=headers, timeout=10)


def test_a_loopback_server_refuses_a_foreign_host_header(tmp_path: Path) -> None:
    extra = ("--allowed-host", "dev.test")
    with ServerProcess(store="memory", state_dir=tmp_path, extra_args=extra) as server:
        port = server.url.rsplit(":", 1)[1]
        # A page under the attacker's name, rebound to 127.0.0.1: nothing it asks is served.
        rebound = _init(server, f"{REBIND}:{port}", 1)
        metrics = httpx.get(f"{server.url}/metrics", headers={"Host": REBIND}, timeout=10)
        health = httpx.get(f"{server.url}/health", headers={"Host": REBIND}, timeout=10)
        status = httpx.get(f"{server.url}/v1/rollout/rebind-1", timeout=10)
        # The server's own names, and the one added.
        own = [
            _init(server, f"{name}:{port}", n)
            for n, name in enumerate(["127.0.0.1", "localhost", "LOCALHOST", "dev.test"], start=2)
        ]
    assert rebound.status_code == 421
    assert rebound.headers["content-type"].startswith("application/json")
    assert REBIND in rebound.json()["detail"] and "--allowed-host" in rebound.json()["detail"]
    assert (metrics.status_code, health.status_code) == (421, 421)
    assert status.status_code == 404  # the refused init stored nothing
    assert [answer.status_code for answer in own] == [202] * 4


def test_docs_and_the_schema_need_the_key_when_one_is_set(tmp_path: Path) -> None:
    with ServerProcess(store="memory", state_dir=tmp_path, server_key="docs-key") as server:
        anonymous = [httpx.get(f"{server.url}{p}", timeout=10) for p in ("/docs", "/openapi.json")]
        keyed = [
            httpx.get(f"{server.url}{p}", headers={"Authorization": "Bearer docs-key"}, timeout=10)
            for p in ("/docs", "/openapi.json")
        ]
        health = httpx.get(f"{server.url}/health", timeout=10)
    assert [a.status_code for a in anonymous] == [401, 401]
    assert [a.status_code for a in keyed] == [200, 200]
    assert "/v1/rollout/init" in keyed[1].json()["paths"]
    assert health.status_code == 200  # a load balancer's probe needs no key


async def _probe(app: Any, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as client:
        return (await client.get("/v1/rollout/unknown", headers=headers)).status_code


async def test_serve_agent_loop_generates_and_shows_a_key_as_v1_did(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from examples.calculator.agent import agent_loop

    serve_agent_loop(agent_loop, store="memory", state_dir=tmp_path)  # v1's 0.0.0.0
    [call] = served
    shown = capsys.readouterr().err
    key = shown.rsplit(": ", 1)[1].strip()
    assert key.startswith("osm_rollout_") and len(key) > 40
    assert call["host"] == "0.0.0.0"
    assert await _probe(call["app"], None) == 401
    assert await _probe(call["app"], key) == 404  # unknown rollout: the key passed


async def test_serve_agent_loop_local_debug_serves_without_a_key_on_loopback_only(
    served: list[dict[str, Any]], tmp_path: Path
) -> None:
    from examples.calculator.agent import agent_loop

    with pytest.raises(ServeError, match="allow_unauthenticated=True"):
        serve_agent_loop(agent_loop, local_debug=True, store="memory", state_dir=tmp_path)
    with pytest.raises(ServeError, match="exclude each other"):
        serve_agent_loop(agent_loop, local_debug=True, api_key="k", host="127.0.0.1")
    assert served == []
    serve_agent_loop(
        agent_loop, local_debug=True, host="127.0.0.1", store="memory", state_dir=tmp_path
    )
    serve_agent_loop(
        agent_loop, local_debug=True, allow_unauthenticated=True, store="memory", state_dir=tmp_path
    )
    assert [call["host"] for call in served] == ["127.0.0.1", "0.0.0.0"]
    assert [await _probe(call["app"], None) for call in served] == [404, 404]
