"""The agent-loop registry and the MODULE:ATTRIBUTE loader."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_sdk.agent.registry import (
    AgentLoopRegistry,
    get_agent_loop,
    list_agent_loops,
    register_agent_loop,
    unregister_agent_loop,
)
from rollout_sdk.errors import AgentLoopNotFoundError, ConfigurationError, OsmosisRolloutError
from rollout_sdk.loader import load_agent_loop, load_object

from .support import EchoAgent


class OtherAgent(EchoAgent):
    name = "other"


# --------------------------------------------------------------------------- registry


def test_registry_register_get_list_unregister() -> None:
    registry = AgentLoopRegistry()
    echo, other = EchoAgent(), OtherAgent()
    registry.register(echo)
    registry.register(other)
    assert registry.get("echo") is echo
    assert registry.get("missing") is None
    assert registry.list_names() == ["echo", "other"]
    assert registry.unregister("echo") is True
    assert registry.unregister("echo") is False
    assert registry.list_names() == ["other"]
    registry.clear()
    assert registry.list_names() == []


def test_registry_duplicate_name_is_refused() -> None:
    registry = AgentLoopRegistry()
    first = EchoAgent()
    registry.register(first)
    with pytest.raises(ValueError, match="'echo' is already registered"):
        registry.register(EchoAgent())
    assert registry.get("echo") is first


@pytest.fixture
def global_registry() -> Iterator[None]:
    before = set(list_agent_loops())
    yield
    for name in set(list_agent_loops()) - before:
        unregister_agent_loop(name)


@pytest.mark.usefixtures("global_registry")
def test_global_registry_functions() -> None:
    agent = OtherAgent()
    register_agent_loop(agent)
    assert get_agent_loop("other") is agent
    assert "other" in list_agent_loops()
    with pytest.raises(ValueError, match="already registered"):
        register_agent_loop(OtherAgent())
    assert unregister_agent_loop("other") is True
    assert "other" not in list_agent_loops()


@pytest.mark.usefixtures("global_registry")
def test_get_unknown_agent_loop_names_the_available_ones() -> None:
    register_agent_loop(OtherAgent())
    with pytest.raises(AgentLoopNotFoundError) as caught:
        get_agent_loop("nope")
    assert caught.value.name == "nope"
    assert "other" in caught.value.available
    assert "'nope' is not registered" in str(caught.value)
    assert "other" in str(caught.value)
    assert isinstance(caught.value, OsmosisRolloutError)


def test_not_found_message_with_nothing_registered() -> None:
    assert "none registered" in str(AgentLoopNotFoundError("x"))


# --------------------------------------------------------------------------- loader


@pytest.fixture
def agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A scratch folder as the current directory, with sys.path and sys.modules restored."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def write_module(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


AGENT_SOURCE = """
    from rollout_sdk.agent.loop import RolloutAgentLoop


    class LoadedAgent(RolloutAgentLoop):
        name = "loaded"

        def get_tools(self, request):
            return []

        async def run(self, ctx):
            return ctx.complete([])


    class NeedsArgs(LoadedAgent):
        def __init__(self, model):
            self.model = model


    class Holder:
        agent = LoadedAgent()


    agent_loop = LoadedAgent()
"""


def test_load_instance_and_class_from_the_current_directory(agent_dir: Path) -> None:
    write_module(agent_dir, "rl_loader_agent_a", AGENT_SOURCE)
    instance = load_agent_loop("rl_loader_agent_a:agent_loop")
    assert type(instance).__name__ == "LoadedAgent"
    built = load_agent_loop("rl_loader_agent_a:LoadedAgent")
    assert type(built).__name__ == "LoadedAgent"
    assert built is not instance
    nested = load_object("rl_loader_agent_a:Holder.agent")
    assert nested.name == "loaded"


def test_load_object_from_a_dotted_module() -> None:
    import json.decoder

    assert load_object("json.decoder:JSONDecoder") is json.decoder.JSONDecoder


@pytest.mark.parametrize("spec", ["no_colon_here", ":agent", "module:", "", ":"])
def test_bad_spec_format(spec: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_object(spec)
    assert "MODULE:ATTRIBUTE" in str(caught.value)
    assert "examples.calculator.agent:agent_loop" in str(caught.value)


def test_missing_module_says_where_it_looked(agent_dir: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_object("rl_loader_no_such_module:agent")
    message = str(caught.value)
    assert "cannot import module 'rl_loader_no_such_module'" in message
    assert str(agent_dir) in message


def test_missing_package_of_a_dotted_module(agent_dir: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot import module"):
        load_object("rl_loader_no_pkg.sub:agent")


def test_missing_attribute_names_module_and_attribute(agent_dir: Path) -> None:
    write_module(agent_dir, "rl_loader_agent_b", AGENT_SOURCE)
    with pytest.raises(ConfigurationError) as caught:
        load_object("rl_loader_agent_b:agent_lop")
    assert "module 'rl_loader_agent_b' has no attribute 'agent_lop'" in str(caught.value)


def test_class_needing_arguments_asks_for_an_instance(agent_dir: Path) -> None:
    write_module(agent_dir, "rl_loader_agent_c", AGENT_SOURCE)
    with pytest.raises(ConfigurationError, match="point at an instance instead"):
        load_agent_loop("rl_loader_agent_c:NeedsArgs")


def test_missing_dependency_of_the_agent_module_is_not_hidden(agent_dir: Path) -> None:
    write_module(agent_dir, "rl_loader_agent_d", "import rl_loader_missing_dependency\n")
    with pytest.raises(ConfigurationError) as caught:
        load_object("rl_loader_agent_d:agent")
    # The real error, named, with the fix: not "cannot import module rl_loader_agent_d".
    assert "No module named 'rl_loader_missing_dependency'" in str(caught.value)
    assert "install rl_loader_missing_dependency" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, ModuleNotFoundError) and cause.name == "rl_loader_missing_dependency"


def test_missing_dependency_whose_name_prefixes_the_module_is_not_hidden(agent_dir: Path) -> None:
    # The agent module "rl_loader_dep_agent" exists but imports the missing "rl_loader_dep":
    # the error must be the real one, not "cannot import module rl_loader_dep_agent".
    write_module(agent_dir, "rl_loader_dep_agent", "import rl_loader_dep\n")
    with pytest.raises(ConfigurationError) as caught:
        load_object("rl_loader_dep_agent:agent")
    assert "No module named 'rl_loader_dep'" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, ModuleNotFoundError) and cause.name == "rl_loader_dep"
