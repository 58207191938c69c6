"""`rollout-sdk register` against a rollout server and a platform stand-in on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request

from examples.calculator.agent import agent_loop
from rollout_sdk.engine.no_v1 import NoV1AgentLoop
from rollout_sdk.engine.workflows import Workflows
from rollout_sdk.errors import RegisterError
from rollout_sdk.http.app import local_app, local_engine
from rollout_sdk.local.register import mask, parse_target, register
from rollout_sdk.local.server import build_local_app
from rollout_sdk.osmosis03 import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext
from rollout_sdk.settings import load_settings
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.testing.threads import ServerThread

SERVER_KEY = "server-key-0123456789"
TOKEN = "platform-token-abcdef"


class Platform:
    def __init__(self, status: str = "healthy") -> None:
        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()
        self.status = status

        @self.app.post("/api/cli/rollout-server/register")
        async def _register(request: Request) -> dict[str, Any]:
            self.requests.append({"headers": dict(request.headers), "body": await request.json()})
            error = None if self.status == "healthy" else "health check timed out"
            return {"id": "srv-1", "status": self.status, "health_check_result": {"error": error}}


@pytest.fixture
def rollout_server(tmp_path: Any) -> Iterator[str]:
    app = build_local_app(agent_loop, store="memory", api_keys=[SERVER_KEY])
    with ServerThread(app) as server:
        yield server.url


@pytest.fixture
def platform() -> Iterator[tuple[Platform, str]]:
    stand_in = Platform()
    with ServerThread(stand_in.app) as server:
        yield stand_in, server.url


def test_register_checks_health_then_sends_host_port_name_and_key(
    rollout_server: str, platform: tuple[Platform, str]
) -> None:
    stand_in, platform_url = platform
    echoed: list[str] = []
    result = register(
        url=rollout_server,
        server_key=SERVER_KEY,
        platform_token=TOKEN,
        platform_url=platform_url,
        workspace="ws-42",
        echo=echoed.append,
    )
    assert result["status"] == "healthy"
    [sent] = stand_in.requests
    host, port = rollout_server.removeprefix("http://").split(":")
    assert sent["body"] == {
        "host": host,
        "port": int(port),
        "agent_loop_name": "calculator",
        "api_key": SERVER_KEY,
    }
    assert sent["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert sent["headers"]["x-osmosis-org"] == "ws-42"
    text = "\n".join(echoed)
    assert SERVER_KEY not in text and TOKEN not in text  # masked
    assert mask(SERVER_KEY) in text and '"agent_loop_name": "calculator"' in text


def test_a_wrong_server_key_stops_before_the_platform(
    rollout_server: str, platform: tuple[Platform, str]
) -> None:
    stand_in, platform_url = platform
    with pytest.raises(RegisterError, match="401"):
        register(
            url=rollout_server,
            server_key="wrong",
            platform_token=TOKEN,
            platform_url=platform_url,
            echo=lambda _: None,
        )
    assert stand_in.requests == []


def test_https_urls_register_as_host_and_443() -> None:
    target = parse_target("https://abc123.execute-api.us-east-1.amazonaws.com/")
    assert (target.host, target.port) == ("abc123.execute-api.us-east-1.amazonaws.com", 443)


def test_a_url_with_a_path_is_refused_with_the_reason() -> None:
    with pytest.raises(RegisterError, match="path"):
        parse_target("https://abc.execute-api.us-east-1.amazonaws.com/prod")


def test_a_url_with_user_info_is_refused_without_showing_it() -> None:
    with pytest.raises(RegisterError, match="user info") as refused:
        parse_target("https://admin:s3cret-key@abc.execute-api.us-east-1.amazonaws.com/")
    assert "s3cret-key" not in str(refused.value)


def test_cli_exit_codes(
    rollout_server: str, platform: tuple[Platform, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from rollout_sdk.local.cli import main

    stand_in, platform_url = platform
    args = [
        "register",
        "--url",
        rollout_server,
        "--api-key",
        SERVER_KEY,
        "--token",
        TOKEN,
        "--platform-url",
        platform_url,
    ]
    assert main(args) == 0
    stand_in.status = "unhealthy"
    assert main(args) == 2
    assert main([*args[:3], "--api-key", "nope", *args[5:]]) == 1
    err = capsys.readouterr().err
    assert "health check timed out" in err
    assert "401" in err


def test_cli_reads_the_key_token_workspace_and_platform_from_the_settings(
    rollout_server: str, platform: tuple[Platform, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollout_sdk.local.cli import main
    from rollout_sdk.settings import reset_settings

    stand_in, platform_url = platform
    monkeypatch.setenv("ROLLOUT_SDK_SERVER_KEY", SERVER_KEY)
    monkeypatch.setenv("OSMOSIS_PLATFORM_TOKEN", TOKEN)
    monkeypatch.setenv("OSMOSIS_WORKSPACE_ID", "ws-env")
    monkeypatch.setenv("OSMOSIS_PLATFORM_URL", platform_url)
    reset_settings()  # the rollout server's fixture has read them once already
    assert main(["register", "--url", rollout_server]) == 0
    # Options win over the environment.
    reset_settings()
    monkeypatch.setenv("OSMOSIS_PLATFORM_URL", "http://127.0.0.1:9")  # closed: never used
    assert main(["register", "--url", rollout_server, "--platform-url", platform_url]) == 0
    assert (
        main(
            [
                "register",
                "--url",
                rollout_server,
                "--platform-url",
                platform_url,
                "--workspace",
                "ws-opt",
            ]
        )
        == 0
    )
    first, second, third = stand_in.requests
    assert first["body"]["api_key"] == SERVER_KEY
    assert first["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert [r["headers"]["x-osmosis-org"] for r in (first, second, third)] == [
        "ws-env",
        "ws-env",
        "ws-opt",
    ]


def test_register_says_which_protocols_the_url_serves(
    rollout_server: str, platform: tuple[Platform, str]
) -> None:
    _, platform_url = platform
    echoed: list[str] = []
    register(
        url=rollout_server,
        server_key=SERVER_KEY,
        platform_token=TOKEN,
        platform_url=platform_url,
        echo=echoed.append,
    )
    assert "  serves: v1 (POST /v1/rollout/init, agent loop 'calculator')" in echoed


class Echo(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        return list(ctx.prompt)


def test_a_server_of_0_3_8_only_is_not_registered_and_the_fix_is_named(
    platform: tuple[Platform, str],
) -> None:
    stand_in, platform_url = platform
    agent = NoV1AgentLoop()
    engine = local_engine(
        agent,
        load_settings(),
        store=MemoryStore(),
        workflows=Workflows(workflow=Echo, name="tests.aws.test_register:Echo"),
    )
    with (
        ServerThread(local_app(agent, engine, keys=[SERVER_KEY])) as server,
        pytest.raises(RegisterError, match=r"serves osmosis-ai 0\.3\.8 only") as refused,
    ):
        register(
            url=server.url,
            server_key=SERVER_KEY,
            platform_token=TOKEN,
            platform_url=platform_url,
            echo=lambda _: None,
        )
    assert "RolloutClient" in str(refused.value) and "AgentLoop" in str(refused.value)
    assert stand_in.requests == []
