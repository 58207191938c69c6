"""The public facade: every v1 name resolves, and the agent author's import stays light.

Import checks run in fresh interpreters (this one has loaded everything long ago), each with
probe_import's timeout.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import rollout_sdk
from rollout_sdk._exports import EXPORTS
from testkit.imports import AUTHOR_IMPORT, SERVER_MODULES, probe_import

from .test_v1_surface import V1_ALL

#: The kit's names beyond v1's (tests/unit/test_v1_surface.py lists v1's, from its source): the
#: root of its exception tree and the in-server LLM client.
KIT_NAMES = ("RolloutError", "RolloutLLMClient")


def test_all_is_v1s_names_and_the_kits() -> None:
    # None of v1's names may go, and nothing is exported by accident.
    assert len(set(rollout_sdk.__all__)) == len(rollout_sdk.__all__)
    assert sorted(rollout_sdk.__all__) == sorted([*V1_ALL, *KIT_NAMES])


def test_every_name_resolves_to_its_module_object() -> None:
    from rollout_sdk import errors
    from rollout_sdk.agent import llm_client, loop, validation

    for name in rollout_sdk.__all__:
        assert getattr(rollout_sdk, name) is not None, name
    assert set(rollout_sdk.__all__) <= set(dir(rollout_sdk))
    assert rollout_sdk.OsmosisLLMClient is llm_client.OsmosisLLMClient
    assert issubclass(rollout_sdk.OsmosisLLMClient, loop.RolloutLLMClient)
    assert rollout_sdk.ValidationError is validation.ValidationError  # v1's, not pydantic's
    assert rollout_sdk.ServeError is errors.ServeError
    assert rollout_sdk.MessageDict == rollout_sdk.SamplingParamsDict == dict[str, Any]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = rollout_sdk.no_such_name


def test_the_type_checking_imports_match_the_lazy_map() -> None:
    # What mypy sees (the imports under TYPE_CHECKING) and what runs (_EXPORTS) must agree.
    tree = ast.parse(Path(rollout_sdk.__file__).read_text(encoding="utf-8"))
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    # ``X as X``: the explicit re-export type checkers need (__all__ is computed).
                    assert alias.asname == alias.name, alias.name
                    seen[alias.name] = str(statement.module)
    mapped = {n: m for m, names in EXPORTS.items() for n in names}
    assert seen == mapped
    assert sorted(mapped) == sorted(rollout_sdk.__all__)


def test_the_agent_authors_import_loads_no_server_module() -> None:
    probe = probe_import(AUTHOR_IMPORT)
    assert probe.ok, probe.error
    assert probe.loaded(SERVER_MODULES) == []
    assert probe.loaded(["pydantic_settings", "rollout_sdk.local", "rollout_sdk.http"]) == []


def test_naming_the_client_and_the_network_helpers_loads_no_http_stack() -> None:
    # Both reach the HTTP stack only when called (OsmosisLLMClient(...), detect_public_ip()).
    probe = probe_import(
        "from rollout_sdk import OsmosisLLMClient, detect_public_ip, validate_ipv4, "
        "is_private_ip, is_valid_hostname_or_ip, PublicIPDetectionError"
    )
    assert probe.ok, probe.error
    assert probe.loaded([*SERVER_MODULES, "aiohttp", "pydantic_settings"]) == []


def test_importing_the_package_alone_loads_none_of_its_modules() -> None:
    probe = probe_import("import rollout_sdk")
    assert probe.ok, probe.error
    assert probe.loaded(["rollout_sdk"]) == [
        "rollout_sdk",
        "rollout_sdk._exports",
        "rollout_sdk._lazy",
    ]
    assert probe.loaded(["pydantic"]) == []


def test_the_store_port_loads_no_sqlite_and_the_dispatch_port_no_aws() -> None:
    probe = probe_import("import rollout_sdk.store.base, rollout_sdk.dispatch.base")
    assert probe.ok, probe.error
    assert probe.loaded(["sqlite3", "boto3", "botocore"]) == []


def test_a_heavy_name_still_loads_on_use() -> None:
    probe = probe_import("from rollout_sdk import create_app")
    assert probe.ok, probe.error
    assert "fastapi" in probe.loaded(["fastapi"])


def test_a_failing_statement_reports_its_error() -> None:
    probe = probe_import("import rollout_sdk.no_such_module")
    assert not probe.ok
    assert "ModuleNotFoundError" in (probe.error or "")


def test_serve_agent_loop_imports_where_the_local_server_is_absent() -> None:
    # The Lambda artifact leaves rollout_sdk/local out; a v1 agent that imports serve_agent_loop
    # for its __main__ block must still import there, and only calling it may fail, clearly.
    probe = probe_import(
        "import sys; sys.modules['rollout_sdk.local'] = None\n"
        "from rollout_sdk import DEFAULT_PORT, RolloutAgentLoop, ServeError, serve_agent_loop\n"
        "try:\n"
        "    serve_agent_loop(RolloutAgentLoop)\n"
        "except ServeError as exc:\n"
        "    assert 'not part of this deployment' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('serve_agent_loop ran without the local server')\n"
    )
    assert probe.ok, probe.error
    assert probe.loaded(["rollout_sdk.local.server", "uvicorn", "fastapi"]) == []
