"""The ``rollout-sdk`` command: serve, validate, demo, test.

Each command imports what it runs inside its own function: ``rollout-sdk --help``, ``validate``
and every other command load only their own libraries (uvicorn, moto, boto3, httpx), so the CLI
starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rollout_sdk.local.server import DEFAULT_STATE_DIR, SQLITE_FILE

if TYPE_CHECKING:
    from pydantic import SecretStr

DEFAULT_AGENT = "examples.calculator.agent:agent_loop"
DEFAULT_DATASET = "examples/calculator/dataset.jsonl"


def _secret(value: SecretStr | None) -> str:
    """A key from the settings, or "" when it is not set."""
    return "" if value is None else value.get_secret_value()


def _fail(message: str, code: int = 2) -> int:
    print(f"rollout-sdk: error: {message}", file=sys.stderr)
    return code


def _cmd_validate(args: argparse.Namespace) -> int:
    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, MCPLoadError
    from rollout_sdk.loader import load_agent_loop

    try:
        agent_loop = load_agent_loop(args.agent)
    except (ConfigurationError, MCPLoadError) as exc:
        return _fail(str(exc), 1)
    result = validate_agent_loop(agent_loop)
    print(format_report(result, verbose=args.verbose))
    return 0 if result.valid else 1


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, MCPLoadError, ServeError, StoreError
    from rollout_sdk.loader import load_agent_loop
    from rollout_sdk.local.exposure import Exposure
    from rollout_sdk.local.server import build_local_app
    from rollout_sdk.settings import get_settings

    try:
        settings = get_settings()
        if args.mcp is not None:
            from rollout_sdk.mcp import agent_loop_from_folder

            agent_loop = agent_loop_from_folder(args.mcp)
        else:
            agent_loop = load_agent_loop(args.agent)
    except (ConfigurationError, MCPLoadError) as exc:
        return _fail(str(exc), 1)
    result = validate_agent_loop(agent_loop)
    if not result.valid:
        print(format_report(result), file=sys.stderr)
        return 1
    keys = [k for k in (args.api_key, _secret(settings.cli.server_key)) if k]
    try:
        exposure = Exposure(
            args.host,
            args.port,
            keyed=bool(keys),
            allow_unauthenticated=args.allow_unauthenticated,
            allowed_hosts=tuple(args.allowed_host),
        )
        exposure.check()
    except ServeError as exc:
        return _fail(str(exc), 2)
    emulator = None
    store: Any = args.store
    where = (
        f"SQLite at {Path(args.state_dir) / SQLITE_FILE}" if args.store == "sqlite" else "memory"
    )
    try:
        if args.store == "dynamodb":
            from rollout_sdk.local.emulator import EmbeddedMoto
            from rollout_sdk.local.server import open_dynamodb_store, owner_id

            endpoint = args.dynamodb_endpoint
            if endpoint is None:
                emulator = EmbeddedMoto().start()
                endpoint = emulator.endpoint_url
            store = open_dynamodb_store(
                endpoint,
                template=args.template,
                with_payload_bucket=emulator is not None,
                # On an endpoint that outlives this server, its records name it: its restart
                # sweep finds them (the embedded emulator dies with the server: nothing to find).
                owner=None if emulator is not None else owner_id(args.state_dir),
            )
            where = f"DynamoDB at {endpoint}" + (
                " (embedded moto, stopped on exit)" if emulator else ""
            )
        app = build_local_app(
            agent_loop,
            store=store,
            state_dir=args.state_dir,
            api_keys=keys,
            settings=settings,
            debug_dir=args.debug_dir,
            host_check=exposure.host_check(),
        )
        print(
            f"rollout-sdk: serving agent loop {agent_loop.name!r} on http://{args.host}:{args.port} "
            f"(store: {where}; {exposure.describe()})",
            file=sys.stderr,
        )
        forgets = _what_a_restart_forgets(args.store, embedded=emulator is not None)
        if forgets:
            print(f"rollout-sdk: note: {forgets}", file=sys.stderr)
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,
            loop=args.loop,
            http=args.http,
        )
    except (ConfigurationError, StoreError) as exc:
        return _fail(str(exc), 1)
    finally:
        if emulator is not None:
            emulator.stop()
    return 0


def _what_a_restart_forgets(store: str, *, embedded: bool) -> str | None:
    """What the chosen store loses when the server stops, said at start-up; None for SQLite and
    ``--dynamodb-endpoint``, whose restart sweep reports every rollout a stopped server left in
    flight (the server's owner id, in its state folder, names its records)."""
    if store == "memory" or embedded:
        what = "the memory store" if store == "memory" else "the embedded emulator"
        return (
            f"{what} forgets everything when this server stops: idempotency records, final "
            "responses, and rollouts still in flight, which are then never reported; the "
            "default SQLite store keeps them"
        )
    return None


def _cmd_invoke(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from rollout_sdk.errors import ConfigurationError
    from rollout_sdk.local import invoke as inv
    from rollout_sdk.local.emulator import EmbeddedMoto, provision
    from rollout_sdk.local.register import mask

    try:
        template = inv.load(args.template)
        logical_id = inv.resolve_function(template, args.function)
        event = inv.load_event(args.event)
    except ConfigurationError as exc:
        return _fail(str(exc), 1)
    agent = args.agent or str(template.get("Parameters", {}).get("AgentLoop", {}).get("Default"))
    emulator: EmbeddedMoto | None = None
    standin_server = None
    try:
        endpoint = args.endpoint
        if endpoint is None:
            emulator = EmbeddedMoto().start()
            endpoint = emulator.endpoint_url
        resources = provision(
            endpoint, template_path=args.template, agent_loop=agent, server_key=args.server_key
        )
        hosts = [h for h in (args.allowed_server_hosts or "").split(",") if h.strip()]
        if args.standin:
            event, standin_server = _with_standin(event)
            # As an operator names a TrainGate the kit may call at a private address.
            standin_host = urlsplit(standin_server[1].url).netloc
            hosts.append(standin_host)
            print(
                f"rollout-sdk: the TrainGate stand-in is at {standin_server[1].url}; "
                f"AllowedServerHosts={','.join(hosts)}",
                file=sys.stderr,
            )
        overrides = {"AllowedServerHosts": ",".join(hosts)} if hosts else None
        env = inv.function_environment(template, logical_id, resources, overrides)
        handler = inv.import_handler(env)
        timeout = inv.function_timeout(template, logical_id)
        call = inv.invoke(handler, logical_id, event, timeout_seconds=timeout)
        print(json.dumps(call.result, indent=2, default=str))
        for worker_event in call.dispatched:
            shown = {**worker_event, "api_key": mask(worker_event.get("api_key"))}
            print(
                f"rollout-sdk: dispatched to WorkerFunction: {json.dumps(shown)}", file=sys.stderr
            )
            if args.follow:
                worker_timeout = inv.function_timeout(template, "WorkerFunction")
                followed = inv.invoke(
                    handler, "WorkerFunction", worker_event, timeout_seconds=worker_timeout
                )
                print(json.dumps(followed.result, indent=2, default=str))
        if standin_server is not None:
            standin = standin_server[0]
            for rollout_id, bodies in standin.completions.items():
                for body in bodies:
                    print(
                        f"rollout-sdk: TrainGate stand-in received {rollout_id}: "
                        f"{body.get('status')} reward={body.get('reward')}",
                        file=sys.stderr,
                    )
    except ConfigurationError as exc:
        return _fail(str(exc), 1)
    except (BotoCoreError, ClientError) as exc:
        return _fail(f"the AWS emulator at {endpoint} failed: {exc}", 1)
    finally:
        if standin_server is not None:
            standin_server[1].stop()
        if emulator is not None:
            emulator.stop()
    return 0


def _with_standin(event: Any) -> tuple[Any, Any]:
    """Start a TrainGate stand-in and point the init event's server_url at it."""
    from rollout_sdk.testing.standin import TrainGateStandIn
    from rollout_sdk.testing.threads import ServerThread

    standin = TrainGateStandIn()
    server = ServerThread(standin.app).start()
    if isinstance(event, dict) and isinstance(event.get("body"), str):
        try:
            body = json.loads(event["body"])
        except json.JSONDecodeError:
            return event, (standin, server)
        if isinstance(body, dict) and "server_url" in body:
            body["server_url"] = server.url
            event = {**event, "body": json.dumps(body)}
    return event, (standin, server)


def _cmd_register(args: argparse.Namespace) -> int:
    from rollout_sdk.errors import ConfigurationError, RegisterError
    from rollout_sdk.local.register import register
    from rollout_sdk.settings import get_settings

    try:
        cli = get_settings().cli
        result = register(
            url=args.url,
            server_key=args.api_key or _secret(cli.server_key),
            platform_token=args.token or _secret(cli.platform_token),
            platform_url=cli.platform_url if args.platform_url is None else args.platform_url,
            workspace=args.workspace or cli.workspace_id,
        )
    except (ConfigurationError, RegisterError) as exc:
        return _fail(str(exc), 1)
    status = result.get("status")
    print(f"registered: id={result.get('id')} status={status}")
    if status != "healthy":
        error = (result.get("health_check_result") or {}).get("error")
        print(
            f"rollout-sdk: registered but the platform reports it unhealthy: {error}",
            file=sys.stderr,
        )
        return 2
    return 0


def _cmd_redrive(args: argparse.Namespace) -> int:
    import asyncio

    from rollout_sdk.engine.assembly import Engine
    from rollout_sdk.errors import ConfigurationError, StoreError
    from rollout_sdk.local.server import KEY_FILE
    from rollout_sdk.settings import get_settings
    from rollout_sdk.store.sqlite import SQLiteStore
    from rollout_sdk.traingate.client import TrainGateClient
    from rollout_sdk.traingate.outbound import OutboundPolicy, Reach
    from rollout_sdk.vault import LocalVault

    path = Path(args.state_dir) / SQLITE_FILE
    if not path.exists():
        return _fail(
            f"no local store at {path}: run this where `rollout-sdk serve` keeps its state", 1
        )

    async def once() -> int:
        settings = get_settings()
        store = SQLiteStore(path)
        client = TrainGateClient(
            settings.client, policy=OutboundPolicy.from_settings(settings.kit, where=Reach.PRIVATE)
        )
        # Delivery and settlement only: the re-drive sends stored responses, it runs no agent.
        engine = Engine.build(
            store=store,
            client=client,
            settings=settings,
            vault=LocalVault(Path(args.state_dir) / KEY_FILE),
        )
        try:
            report = await engine.recovery.redrive(limit=args.limit)
        finally:
            await client.aclose()
            await store.close()
        print(f"rollout-sdk redrive: {report.summary()}")
        for rollout_id, error in report.failed.items():
            print(f"  {rollout_id}: {error}", file=sys.stderr)
        return 1 if report.failed else 0

    try:
        return asyncio.run(once())
    except (ConfigurationError, StoreError) as exc:
        return _fail(str(exc), 1)


def _cmd_demo(args: argparse.Namespace) -> int:
    from rollout_sdk.local.demo import run_demo

    return run_demo(args)


def _cmd_test(args: argparse.Namespace) -> int:
    from rollout_sdk.local.testrun import run_test

    return run_test(args)


def _add_test_parser(sub: Any) -> None:
    """``rollout-sdk test``: v1's ``osmosis test`` options, plus --concurrency and --timeout."""
    test = sub.add_parser(
        "test",
        help="run an agent over a dataset against a real OpenAI-compatible model",
        description=(
            "Run an agent loop over the rows of a dataset against a real model, through the "
            "kit's own server and worker: a local TrainGate on 127.0.0.1 forwards each chat "
            "call to an OpenAI-compatible endpoint (OpenAI by default; vLLM, SGLang, Ollama or "
            "a LiteLLM proxy with --base-url). Rows are .jsonl, .csv or .parquet with the "
            "columns system_prompt, user_prompt and ground_truth (any case); other columns go "
            "into the metadata. Exit 0 when every row completed, 1 when one failed (or the run "
            "could not start), 2 for bad options."
        ),
    )
    agent = test.add_mutually_exclusive_group()
    agent.add_argument(
        "-m",
        "--module",
        "--agent",
        dest="module",
        metavar="MODULE:ATTR",
        help="the agent loop, e.g. examples.calculator.agent:agent_loop",
    )
    agent.add_argument(
        "--mcp",
        metavar="DIR",
        help="a folder whose main.py defines a FastMCP server: its tools, no agent code "
        "(needs rollout-sdk[mcp])",
    )
    test.add_argument(
        "-d", "--dataset", required=True, metavar="FILE", help="dataset: .jsonl, .csv or .parquet"
    )
    test.add_argument(
        "--model",
        default="gpt-5-mini",
        help="model name (default gpt-5-mini); 'openai/NAME' is sent as NAME, other "
        "'provider/NAME' only with --base-url",
    )
    test.add_argument("--limit", type=int, metavar="N", help="test at most N rows (default all)")
    test.add_argument(
        "--offset", type=int, default=0, metavar="N", help="skip the first N rows (default 0)"
    )
    key = test.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help="the endpoint's API key (default: OPENAI_API_KEY). A key on the command line is "
        "visible to other users in the process list: prefer OPENAI_API_KEY or --api-key-file",
    )
    key.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="read the endpoint's API key from the first line of PATH (not with --api-key)",
    )
    test.add_argument(
        "--base-url",
        metavar="URL",
        help="base URL of an OpenAI-compatible API, e.g. http://localhost:8000/v1 "
        "(default https://api.openai.com/v1); user:password@ in it is sent as HTTP Basic auth "
        "instead of a key (not with --api-key or --api-key-file; OPENAI_API_KEY is then not "
        "used), and shown as ***, as are its query values",
    )
    test.add_argument(
        "--max-turns", type=int, default=10, metavar="N", help="turn budget per row (default 10)"
    )
    test.add_argument(
        "--max-tokens", type=int, metavar="N", help="completion params: max_tokens per call"
    )
    test.add_argument(
        "--temperature", type=float, metavar="T", help="completion params: temperature"
    )
    test.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="rows at once (default 1)"
    )
    test.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="per chat call to the endpoint (default 300)",
    )
    test.add_argument(
        "--debug",
        action="store_true",
        help="show the kit's logs and tracebacks; write ctx.log_event traces to ./test_debug",
    )
    test.add_argument("-o", "--output", metavar="FILE", help="write the results as JSON here")
    test.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress, no summary (an error that stops the command still shows)",
    )
    test.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="pause at each chat call to show the answer, its tool calls and the messages",
    )
    test.add_argument("--row", type=int, metavar="N", help="with --interactive: start with row N")
    test.set_defaults(func=_cmd_test)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render ``--help`` in the docs)."""
    parser = argparse.ArgumentParser(
        prog="rollout-sdk",
        description="Run remote-rollout agent loops for RL training: locally, or on AWS Lambda.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the local rollout server",
        description=(
            "Run the local rollout server: the same app and worker code as on Lambda, in one "
            "process, behind uvicorn. Settings come from the OSMOSIS_ROLLOUT_* and "
            "ROLLOUT_SDK_* environment variables (see the README). The server calls TrainGate "
            "at public, loopback and private addresses, never link-local ones (cloud metadata) "
            "unless ROLLOUT_SDK_ALLOW_LINK_LOCAL=true, and only the hosts in "
            "ROLLOUT_SDK_ALLOWED_SERVER_HOSTS when it is set: an init naming another is a 422 "
            "(docs/security.md). Init bodies are held to ROLLOUT_SDK_MAX_BODY_BYTES and to "
            "counts checked before parsing (413), answers to ROLLOUT_SDK_MAX_ANSWER_BYTES."
        ),
    )
    # One of the two: an agent loop of your own, or the MCPAgentLoop of an MCP folder.
    served = serve.add_mutually_exclusive_group(required=True)
    served.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="the agent loop to serve, e.g. examples.calculator.agent:agent_loop",
    )
    served.add_argument(
        "--mcp",
        metavar="DIR",
        help="instead of --agent: serve the built-in MCPAgentLoop on the FastMCP server that "
        "DIR/main.py defines, e.g. examples/mcp_calculator (needs pip install 'rollout-sdk[mcp]')",
    )
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
        help="with --store dynamodb: the SAM template the table is created from",
    )
    serve.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        metavar="DIR",
        help=f"folder of the SQLite store, relative to the current directory "
        f"(default {DEFAULT_STATE_DIR}/, file {SQLITE_FILE})",
    )
    serve.add_argument(
        "--debug-dir",
        metavar="DIR",
        help="write each rollout's ctx.log_event trace as JSON lines here",
    )
    serve.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug")
    )
    serve.add_argument(
        "--loop",
        default="auto",
        choices=("auto", "asyncio", "uvloop"),
        help="uvicorn's event loop (default auto: uvloop when installed, see the 'speed' extra)",
    )
    serve.add_argument(
        "--http",
        default="auto",
        choices=("auto", "h11", "httptools"),
        help="uvicorn's HTTP parser (default auto: httptools when installed)",
    )
    serve.set_defaults(func=_cmd_serve)

    validate = sub.add_parser(
        "validate",
        help="check an agent loop",
        description="Check an agent loop's name, tools and run method. Exit 0 when valid, 1 with "
        "each error's code and message otherwise.",
    )
    validate.add_argument("agent", metavar="MODULE:ATTR", help="the agent loop to check")
    validate.add_argument("-v", "--verbose", action="store_true", help="say so when all is well")
    validate.set_defaults(func=_cmd_validate)

    invoke = sub.add_parser(
        "invoke",
        help="run a Lambda handler on an event file, without a container engine",
        description=(
            "Run a function of template.yaml on an event file the way `sam local invoke` does: "
            "the function's environment is resolved from the template and set in this "
            "process's environment (over variables of the same name), handler.py is imported "
            "in this process, and AWS is an embedded moto server on 127.0.0.1 (started and "
            "stopped by this command) unless --endpoint is given. Prints the handler's result."
        ),
    )
    invoke.add_argument(
        "function",
        metavar="FUNCTION",
        help="logical id in template.yaml (ApiFunction, WorkerFunction) or alias (api, worker)",
    )
    invoke.add_argument("event", metavar="EVENT_FILE", help="JSON event, e.g. events/init.json")
    invoke.add_argument(
        "--template", default="template.yaml", help="SAM template (default template.yaml)"
    )
    invoke.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="agent loop (default: the template's AgentLoop parameter default)",
    )
    invoke.add_argument(
        "--endpoint",
        metavar="URL",
        help="use this AWS emulator (e.g. one started by serve --store dynamodb) instead of an embedded one",
    )
    invoke.add_argument(
        "--server-key",
        default="local-server-key",
        help="server key stored in the emulator's secret (default local-server-key, as in events/)",
    )
    invoke.add_argument(
        "--follow",
        action="store_true",
        help="also run the worker on every event the API function dispatched",
    )
    invoke.add_argument(
        "--standin",
        action="store_true",
        help=(
            "start a TrainGate stand-in on 127.0.0.1, point the init event's server_url at it "
            "and add it to AllowedServerHosts"
        ),
    )
    invoke.add_argument(
        "--allowed-server-hosts",
        metavar="HOSTS",
        help=(
            "the template parameter AllowedServerHosts (host or host:port, comma-separated). "
            "As on Lambda, the functions call only public addresses and these hosts: a "
            "TrainGate on 127.0.0.1 must be named here (e.g. 127.0.0.1:8081 for events/init.json)"
        ),
    )
    invoke.set_defaults(func=_cmd_invoke)

    register = sub.add_parser(
        "register",
        help="register a deployed server's URL with the platform",
        description=(
            "Check GET {url}/platform/health with the server key, then register the URL with the "
            "platform (POST {platform}/api/cli/rollout-server/register), printing exactly what is "
            "sent with the keys masked. Exit 0 when registered healthy, 2 when registered but "
            "reported unhealthy, 1 on any error."
        ),
    )
    register.add_argument("--url", required=True, help="the stack's ApiUrl output")
    register.add_argument(
        "--api-key",
        metavar="KEY",
        help="the server key (or ROLLOUT_SDK_SERVER_KEY); TrainGate will send it back. A key "
        "on the command line is visible to other users in the process list: prefer "
        "ROLLOUT_SDK_SERVER_KEY",
    )
    register.add_argument(
        "--token",
        help="your platform access token (or OSMOSIS_PLATFORM_TOKEN, which keeps it out of the "
        "process list)",
    )
    register.add_argument(
        "--workspace", help="workspace id sent as X-Osmosis-Org (or OSMOSIS_WORKSPACE_ID)"
    )
    register.add_argument(
        "--platform-url",
        help="platform base URL (default OSMOSIS_PLATFORM_URL or https://platform.osmosis.ai)",
    )
    register.set_defaults(func=_cmd_register)

    redrive = sub.add_parser(
        "redrive",
        help="send undelivered final responses again, once",
        description=(
            "One re-drive pass over the local server's store: every final response whose "
            "callbacks all failed and whose next attempt is due is sent again (with the callback "
            "key sealed in the state folder). Safe while the server runs: a response being sent "
            "by one is skipped by the other. On AWS the scheduled RedriveFunction does this; "
            "run it by hand with `aws lambda invoke --function-name <RedriveFunction> out.json`."
        ),
    )
    redrive.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        metavar="DIR",
        help=f"the server's state folder (default {DEFAULT_STATE_DIR}/)",
    )
    redrive.add_argument(
        "--limit", type=int, default=1000, help="responses to send at most (default 1000)"
    )
    redrive.set_defaults(func=_cmd_redrive)

    demo = sub.add_parser(
        "demo",
        help="run the example agent end to end on this machine",
        description=(
            "Start the local server and a TrainGate stand-in with a scripted model on free "
            "loopback ports, run every row of the dataset as a rollout, print a progress bar and "
            "a summary, and stop both. With --base-url, the rows go to that real endpoint "
            "instead, by the path of `rollout-sdk test` (and its summary)."
        ),
    )
    demo.add_argument(
        "--agent",
        default=DEFAULT_AGENT,
        metavar="MODULE:ATTR",
        help=f"agent loop (default {DEFAULT_AGENT})",
    )
    demo.add_argument(
        "--dataset",
        default=DEFAULT_DATASET,
        metavar="FILE",
        help=f"JSON lines, one rollout per row with 'messages' and optional "
        f"'metadata' (default {DEFAULT_DATASET})",
    )
    demo.add_argument(
        "--store",
        choices=("sqlite", "memory"),
        default="sqlite",
        help="record store of the local server (default sqlite, in a temporary folder)",
    )
    demo.add_argument(
        "--repeat", type=int, default=1, metavar="N", help="run the dataset N times (default 1)"
    )
    demo.add_argument(
        "--concurrency",
        type=int,
        default=16,
        metavar="N",
        help="inits in flight at once (default 16)",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up waiting for callbacks after this long (default 120); with --base-url, "
        "the limit of each chat call to the endpoint",
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="run against this OpenAI-compatible endpoint instead of the scripted model, by "
        "the path of `rollout-sdk test` (e.g. https://api.openai.com/v1)",
    )
    demo.add_argument(
        "--model", metavar="NAME", help="with --base-url: the model (default gpt-5-mini)"
    )
    demo.add_argument(
        "--api-key",
        metavar="KEY",
        help="with --base-url: the endpoint's API key (default: OPENAI_API_KEY). A key on the "
        "command line is visible to other users in the process list: prefer OPENAI_API_KEY",
    )
    demo.set_defaults(func=_cmd_demo)
    _add_test_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rollout-sdk``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
