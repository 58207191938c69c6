"""The deploy config and the docs held to each other: ``infra/samconfig.toml`` names nothing a
user must change by hand (their agent is the template's ``AgentLoop``, or the guided deploy's
answer), and README's build and deploy commands are docs/aws.md's "First deploy" ones."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]


def _overrides(text: str) -> dict[str, str]:
    return dict(token.split("=", 1) for token in shlex.split(text))


def test_the_deploy_config_names_no_agent_and_no_debug_logging() -> None:
    config = tomllib.loads((ROOT / "infra" / "samconfig.toml").read_text())
    for env, commands in config.items():
        if not isinstance(commands, dict):
            continue
        deploy = commands.get("deploy", {}).get("parameters", {})
        overrides = _overrides(deploy.get("parameter_overrides", ""))
        for name in ("AgentLoop", "Workflow", "Grader", "McpFolder"):
            assert name not in overrides, f"[{env}] names {name}: the user's agent is theirs"
        assert overrides.get("LogLevel", "INFO") != "DEBUG", env
        assert "template_file" not in deploy, env  # it would deploy the unbuilt template


def _commands(text: str) -> set[str]:
    """The build and deploy command lines a document gives."""
    lines = {line.strip() for line in text.splitlines()}
    return {
        line
        for line in lines
        if re.search(r"make build-lambda$|sam deploy --guided --config-file \S+$", line)
    }


def test_readme_builds_and_deploys_with_the_first_deploy_commands() -> None:
    readme = _commands((ROOT / "README.md").read_text())
    aws = _commands((ROOT / "docs" / "aws.md").read_text())
    assert readme == {
        "PYENV_VERSION=3.13.0 make build-lambda",
        ".venv-sam/bin/sam deploy --guided --config-file infra/samconfig.toml",
    }
    assert readme <= aws
