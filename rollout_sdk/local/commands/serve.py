"""``rollout-sdk serve``: the local rollout server (:func:`rollout_sdk.local.server.run_server`)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from rollout_sdk.local.commands.common import fail, secret
from rollout_sdk.project import project_path

if TYPE_CHECKING:
    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.engine.workflows import Workflows
    from rollout_sdk.local.exposure import Exposure
    from rollout_sdk.settings import RolloutSettings
from rollout_sdk.local.server import DEFAULT_STATE_DIR, SQLITE_FILE

NAME = "serve"
HELP = "run the local rollout server"
DESCRIPTION = (
    "Run the local rollout server: the same app and worker code as on Lambda, in one "
    "process, behind uvicorn. Settings come from the OSMOSIS_ROLLOUT_* and "
    "ROLLOUT_SDK_* environment variables (docs/settings.md). The server calls TrainGate "
    "at public, loopback and private addresses, never link-local ones (cloud metadata) "
    "unless ROLLOUT_SDK_ALLOW_LINK_LOCAL=true, and only the hosts in "
    "ROLLOUT_SDK_ALLOWED_SERVER_HOSTS when it is set: an init naming another is a 422 "
    "(docs/security.md). Init bodies are held to ROLLOUT_SDK_MAX_BODY_BYTES and to "
    "counts checked before parsing (413), answers to ROLLOUT_SDK_MAX_ANSWER_BYTES. "
    "With --workflow it also serves osmosis-ai 0.3.8's wire (POST /rollout, "
    "GET /rollout/{id}/result, POST /rollout/cancel) for an AgentWorkflow and Grader written "
    "against rollout_sdk.osmosis03 (docs/osmosis03.md)."
)


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """``serve``'s options: what it serves, who may call it, its store, uvicorn's knobs."""
    # A v1 agent loop (one of the two: your own, or the MCPAgentLoop of an MCP folder), an
    # osmosis-ai 0.3.8 workflow, or one of each: both protocols on one server.
    served = serve.add_mutually_exclusive_group()
    served.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="the agent loop to serve, e.g. examples.calculator.agent:agent_loop",
    )
    served.add_argument(
        "--mcp",
        metavar="DIR",
        help="instead of --agent: serve the built-in MCPAgentLoop on the FastMCP server that "
        "DIR/main.py defines, e.g. examples/mcp_calculator (needs the mcp extra)",
    )
    workflow = serve.add_argument_group(
        "osmosis-ai 0.3.8",
        "serve a 0.3.8 AgentWorkflow (and Grader) on the 0.3.8 wire (POST /rollout, "
        "GET /rollout/{id}/result, POST /rollout/cancel), beside or instead of --agent",
    )
    workflow.add_argument(
        "--workflow",
        metavar="MODULE:ATTR",
        help="an AgentWorkflow subclass, e.g. examples.osmosis03.workflow:AnswerWorkflow",
    )
    workflow.add_argument(
        "--grader", metavar="MODULE:ATTR", help="a Grader subclass (needs --workflow)"
    )
    workflow.add_argument(
        "--workflow-config",
        metavar="MODULE:ATTR",
        help="an AgentWorkflowConfig instance handed to each workflow (its concurrency bounds "
        "the rollouts it runs at once)",
    )
    workflow.add_argument(
        "--grader-config", metavar="MODULE:ATTR", help="a GraderConfig instance for the grader"
    )
    _add_access(serve)
    _add_store(serve)
    _add_running(serve)


def _add_access(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 to accept other machines, which "
        "needs a server key or --allow-unauthenticated)",
    )
    serve.add_argument("--port", type=int, default=9000, help="port to bind (default 9000)")
    serve.add_argument(
        "--api-key",
        metavar="KEY",
        help="server key TrainGate must send as 'Authorization: Bearer KEY'; it shows in the "
        "process list, so prefer ROLLOUT_SDK_SERVER_KEY; default: no key, which is allowed on "
        "loopback only",
    )
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve with no server key on an address other machines can reach: only on a "
        "network you trust, since anyone there can start, read and cancel rollouts",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="another name the server answers to (repeatable): a loopback server refuses (421) "
        "any request whose Host header is not its address, localhost, 127.0.0.1 or [::1]; "
        "with another bind address, giving this turns the same check on",
    )


def _add_store(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--store",
        choices=("sqlite", "memory", "dynamodb"),
        default="sqlite",
        help="record store (default sqlite: durable, a restart forgets nothing; "
        "memory: forgets everything on exit; dynamodb: the AWS store, on an embedded moto "
        "server on 127.0.0.1 that this command starts and stops, or on --dynamodb-endpoint)",
    )
    serve.add_argument(
        "--dynamodb-endpoint",
        metavar="URL",
        help="with --store dynamodb: use this DynamoDB-compatible endpoint instead of an "
        "embedded moto server (the table is created from the template if missing)",
    )
    serve.add_argument(
        "--template",
        default="template.yaml",
        type=project_path,
        help="with --store dynamodb: the SAM template the table is created from (default "
        "template.yaml, from here or the project's root)",
    )
    serve.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        metavar="DIR",
        help=f"folder of the SQLite store, relative to the current directory "
        f"(default {DEFAULT_STATE_DIR}/, file {SQLITE_FILE})",
    )


def _add_running(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--debug-dir",
        metavar="DIR",
        help="write each rollout's ctx.log_event trace as JSON lines here",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="the kit's lines and uvicorn's (default info: a line for each step of each "
        "rollout; warning under load, where those lines cost CPU: docs/local.md, 'The local "
        "server')",
    )
    serve.add_argument(
        "--loop",
        default="auto",
        choices=("auto", "asyncio", "uvloop"),
        help="uvicorn's event loop (default auto: uvloop when installed; the kit does not install it, by measurement: docs/local.md, 'The local server')",
    )
    serve.add_argument(
        "--http",
        default="auto",
        choices=("auto", "h11", "httptools"),
        help="uvicorn's HTTP parser (default auto: httptools when installed)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve the agent loop (or MCP folder) until interrupted."""
    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, MCPLoadError, ServeError
    from rollout_sdk.loader import load_agent_loop, load_workflows
    from rollout_sdk.local.exposure import Exposure
    from rollout_sdk.settings import get_settings

    if args.agent is None and args.mcp is None and args.workflow is None:
        return fail(
            "say what to serve: --agent MODULE:ATTR, --mcp DIR, or --workflow MODULE:ATTR", 2
        )
    if args.workflow is None and (args.grader or args.workflow_config or args.grader_config):
        return fail("--grader, --workflow-config and --grader-config go with --workflow", 2)
    try:
        settings = get_settings()
        workflows = (
            None
            if args.workflow is None
            else load_workflows(
                args.workflow, args.grader, args.workflow_config, args.grader_config
            )
        )
        if args.mcp is not None:
            from rollout_sdk.mcp import agent_loop_from_folder

            agent_loop = agent_loop_from_folder(args.mcp)
        elif args.agent is not None:
            agent_loop = load_agent_loop(args.agent)
        else:
            from rollout_sdk.engine.no_v1 import NoV1AgentLoop

            agent_loop = NoV1AgentLoop()
    except (ConfigurationError, MCPLoadError) as exc:
        return fail(str(exc), 1)
    result = validate_agent_loop(agent_loop)
    if not result.valid:
        print(format_report(result), file=sys.stderr)
        return 1
    keys = [k for k in (args.api_key, secret(settings.cli.server_key)) if k]
    exposure = Exposure(
        args.host,
        args.port,
        keyed=bool(keys),
        allow_unauthenticated=args.allow_unauthenticated,
        allowed_hosts=tuple(args.allowed_host),
    )
    try:
        exposure.check()
    except ServeError as exc:
        return fail(str(exc), 2)
    from rollout_sdk.local import logs

    # The kit's lines: time, level, rollout_id and category on each (while it serves), at the
    # level --log-level gives uvicorn's.
    with logs.configured(logging.getLevelNamesMapping()[args.log_level.upper()]):
        return _serve(args, agent_loop, exposure, keys, settings, workflows)


def _serve(
    args: argparse.Namespace,
    agent_loop: RolloutAgentLoop,
    exposure: Exposure,
    keys: list[str],
    settings: RolloutSettings,
    workflows: Workflows | None,
) -> int:
    """Serve until interrupted; 1 with one line when the server cannot start."""
    from rollout_sdk.errors import ConfigurationError, ServeError, StoreError
    from rollout_sdk.local.server import StoreChoice, run_server

    try:
        run_server(
            agent_loop,
            exposure,
            api_keys=keys,
            store=StoreChoice(args.store, args.dynamodb_endpoint, args.template),
            state_dir=args.state_dir,
            settings=settings,
            debug_dir=args.debug_dir,
            log_level=args.log_level,
            loop=args.loop,
            http=args.http,
            announce=lambda line: print(f"rollout-sdk: {line}", file=sys.stderr),
            workflows=workflows,
        )
    except (ConfigurationError, StoreError, ServeError) as exc:
        return fail(str(exc), 1)
    return 0
