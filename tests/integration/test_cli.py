"""The ``rollout-sdk`` command as a subprocess: validate, serve, --help."""

from __future__ import annotations

import re
import socket
import textwrap
from pathlib import Path

import httpx
import pytest

from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from testkit.bodies import calculator_body
from testkit.processes import ServerProcess

from .support import run_cli

pytestmark = pytest.mark.integration

NO_DESCRIPTION_AGENT = """
from rollout_sdk import RolloutAgentLoop


class NoDescription(RolloutAgentLoop):
    name = "no_description"

    def get_tools(self, request):
        return [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]

    async def run(self, ctx):
        return ctx.complete(list(ctx.request.messages))


agent_loop = NoDescription()
"""


def test_validate_accepts_the_ported_v1_agent() -> None:
    result = run_cli("validate", "--verbose", "tests.fixtures.v1_agent.agent:agent_loop")
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_and_serve_refuse_a_tool_without_description(tmp_path: Path) -> None:
    (tmp_path / "nodesc_agent.py").write_text(textwrap.dedent(NO_DESCRIPTION_AGENT))
    validate = run_cli("validate", "nodesc_agent:agent_loop", cwd=tmp_path)
    assert validate.returncode == 1, validate.stdout + validate.stderr
    assert "MISSING_FUNCTION_DESCRIPTION" in validate.stdout
    serve = run_cli(
        "serve",
        "--agent",
        "nodesc_agent:agent_loop",
        "--store",
        "memory",
        "--port",
        "1",
        cwd=tmp_path,
        timeout=30,
    )
    assert serve.returncode == 1, serve.stdout + serve.stderr
    assert "MISSING_FUNCTION_DESCRIPTION" in serve.stderr


def test_validate_names_a_missing_module(tmp_path: Path) -> None:
    result = run_cli("validate", "no_such_module:agent_loop", cwd=tmp_path)
    assert result.returncode == 1
    assert "no_such_module" in result.stderr


def test_an_agent_module_that_fails_to_import_is_one_line_naming_where(tmp_path: Path) -> None:
    (tmp_path / "broken_agent.py").write_text("import os\nimport not_installed_pkg\n")
    (tmp_path / "nameless_agent.py").write_text(
        "from rollout_sdk import RolloutAgentLoop\n\n"
        "class Nameless(RolloutAgentLoop):\n    name = ''\n\n"
        "    def get_tools(self, request):\n        return []\n\n"
        "    async def run(self, ctx):\n        return None\n\n"
        "agent_loop = Nameless()\n"
    )
    broken = run_cli("validate", "broken_agent:agent_loop", cwd=tmp_path)
    assert broken.returncode == 1
    (line,) = broken.stderr.strip().splitlines()  # one line, no traceback
    assert "No module named 'not_installed_pkg'" in line and "broken_agent.py:2" in line
    assert "install not_installed_pkg" in line and "--debug" in line
    nameless = run_cli("validate", "nameless_agent:agent_loop", cwd=tmp_path)
    (line,) = nameless.stderr.strip().splitlines()
    assert "non-empty class attribute 'name'" in line and "nameless_agent.py:3" in line
    # --debug shows the traceback before the same line.
    debug = run_cli("--debug", "validate", "nameless_agent:agent_loop", cwd=tmp_path)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == line


def test_serve_on_a_port_in_use_says_so_in_one_line_and_never_that_it_serves(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            "serve",
            "--agent",
            "examples.calculator.agent:agent_loop",
            "--port",
            str(port),
            "--state-dir",
            str(tmp_path / "state"),
            "--api-key",
            "k",
            timeout=60,
        )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert f"cannot serve on 127.0.0.1:{port}: another process listens there" in line
    assert "--port" in line and "serving" not in result.stderr


def test_the_commands_find_the_projects_files_from_another_folder(tmp_path: Path) -> None:
    """Run from a folder that is not the project's root: the default dataset, template, event
    files and the example agent are the project's."""
    demo = run_cli("demo", cwd=tmp_path, timeout=120)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "every rollout was reported exactly once" in demo.stdout
    valid = run_cli("validate", "examples.calculator.agent:agent_loop", cwd=tmp_path)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    health = run_cli("invoke", "api", "events/health.json", cwd=tmp_path, timeout=120)
    assert health.returncode == 0, health.stderr
    assert '"statusCode": 200' in health.stdout


def test_serve_answers_health_and_guards_platform_health(tmp_path: Path) -> None:
    with ServerProcess(store="sqlite", state_dir=tmp_path, server_key="cli-key") as server:
        health = httpx.get(f"{server.url}/health", timeout=5)
        anonymous = httpx.get(f"{server.url}/platform/health", timeout=5)
        keyed = httpx.get(
            f"{server.url}/platform/health",
            headers={"Authorization": "Bearer cli-key"},
            timeout=5,
        )
        assert server.alive
    assert server.process is not None
    assert server.process.returncode is not None  # stopped
    assert health.status_code == 200
    body = health.json()
    assert {
        k: body[k] for k in ("status", "agent_loop", "active_rollouts", "completed_rollouts")
    } == {
        "status": "healthy",
        "agent_loop": "calculator",
        "active_rollouts": 0,
        "completed_rollouts": 0,
    }
    assert body["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 0}
    assert anonymous.status_code == 401
    assert keyed.status_code == 200
    assert (tmp_path / "rollouts.sqlite3").exists()


@pytest.mark.parametrize("command", [[], ["serve"], ["validate"], ["demo"], ["start-api"]])
def test_help_of_every_command_exits_0(command: list[str]) -> None:
    result = run_cli(*command, "--help", timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: rollout-sdk")


@pytest.mark.parametrize(
    ("option", "env", "accepted"),
    [
        (None, "env-key", ("env-key",)),  # the settings tree's ROLLOUT_SDK_SERVER_KEY
        ("opt-key", None, ("opt-key",)),
        ("opt-key", "env-key", ("opt-key", "env-key")),  # both are accepted, as before
    ],
)
async def test_serve_takes_the_server_key_from_the_option_and_the_settings(
    monkeypatch: pytest.MonkeyPatch, option: str | None, env: str | None, accepted: tuple[str, ...]
) -> None:
    import uvicorn

    from rollout_sdk.local.cli import main

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    if env is not None:
        monkeypatch.setenv("ROLLOUT_SDK_SERVER_KEY", env)
    argv = ["serve", "--agent", "examples.calculator.agent:agent_loop", "--store", "memory"]
    assert main([*argv, *(["--api-key", option] if option else [])]) == 0
    [app] = served
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    # The address it serves on by default, which the Host check admits.
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as client:
        refused = await client.get("/platform/health", headers={"Authorization": "Bearer no"})
        allowed = [
            await client.get("/platform/health", headers={"Authorization": f"Bearer {key}"})
            for key in accepted
        ]
    assert refused.status_code == 401
    assert [r.status_code for r in allowed] == [200] * len(accepted)


def test_serve_says_at_start_up_what_a_memory_store_forgets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    from rollout_sdk.local.cli import main
    from rollout_sdk.local.server import what_a_restart_forgets

    monkeypatch.setattr(uvicorn, "run", lambda app, **_: None)
    argv = ["serve", "--agent", "examples.calculator.agent:agent_loop", "--store", "memory"]
    assert main(argv) == 0
    assert "note: the memory store forgets everything when this server stops" in (
        capsys.readouterr().err
    )
    # SQLite's restart sweep reports what a stopped server left in flight: nothing to say.
    assert what_a_restart_forgets("sqlite", embedded=False) is None
    assert "embedded emulator forgets" in str(what_a_restart_forgets("dynamodb", embedded=True))
    assert what_a_restart_forgets("dynamodb", embedded=False) is None  # swept at restart


@pytest.mark.parametrize(("level", "shown"), [("info", True), ("warning", False)])
def test_serve_log_level_sets_the_kits_lines_too(
    tmp_path: Path, standin: TrainGateStandIn, traingate: ServerThread, level: str, shown: bool
) -> None:
    """``--log-level`` is the kit's level as well as uvicorn's: at info a rollout's steps are
    lines of their own; at warning (how make bench runs the server under load) they are not
    written, nor paid for."""
    with ServerProcess(
        store="memory", state_dir=tmp_path, server_key="cli-key", log_level=level
    ) as server:
        answer = httpx.post(
            f"{server.url}/v1/rollout/init",
            json=calculator_body("r-log", traingate.url),
            headers={"Authorization": "Bearer cli-key"},
            timeout=10,
        )
        assert answer.status_code == 202, answer.text
        assert standin.wait_for(1, 20), server.log_tail()
    assert standin.completions["r-log"][0]["status"] == "COMPLETED"
    log = (tmp_path / "server.log").read_text(encoding="utf-8")
    accepted = re.search(
        r" INFO rollout_sdk\.engine\.service: rollout accepted rollout_id=r-log", log
    )
    assert (accepted is not None) is shown, log
