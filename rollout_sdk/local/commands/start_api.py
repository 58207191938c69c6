"""``rollout-sdk start-api``: the template's API function over HTTP, as ``sam local start-api``
serves it, without Docker (:mod:`rollout_sdk.local.start_api`)."""

from __future__ import annotations

import argparse
import sys

from rollout_sdk.local.commands.common import add_parameter_overrides, fail
from rollout_sdk.local.start_api import DEFAULT_MAX_INSTANCES
from rollout_sdk.project import project_path

NAME = "start-api"
HELP = "serve the template's API function over HTTP, as sam local start-api does, without Docker"
DESCRIPTION = (
    "Serve the template's API function (handler.py's api) on 127.0.0.1: each request becomes "
    "the API Gateway HTTP API event the function gets on Lambda, and its answer the HTTP "
    "answer. As Lambda scales it, each request runs on an idle instance of the function or a "
    "new one (a process that imported handler.py: a cold start), up to --max-instances, past "
    "which it is throttled (API Gateway's 500). The stack around it is made on an AWS "
    "emulator (an embedded moto server, or --endpoint), as rollout-sdk invoke makes it: each "
    "worker event the API function hands off is an asynchronous invocation of the worker "
    "function (retried after a function error as the template says, then sent to its failure "
    "destination), and the re-drive runs on its schedule. Register the URL it prints with "
    "TrainGate, or point a client at it (osmosis-ai 0.3.8's RolloutClient too, with "
    "--parameter-overrides Workflow=...)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--template",
        default="template.yaml",
        type=project_path,
        help="SAM template (default template.yaml, from here or the project's root)",
    )
    parser.add_argument("--port", type=int, default=3000, help="port to bind (default 3000)")
    parser.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="agent loop (default: the template's AgentLoop parameter default)",
    )
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="an AWS emulator to use (e.g. one started by serve --store dynamodb) instead of "
        "an embedded one",
    )
    parser.add_argument(
        "--server-key",
        default="local-server-key",
        help="the server key stored in the emulator's secret, which every call but /health "
        "must send as 'Authorization: Bearer KEY' (default local-server-key, as in events/)",
    )
    add_parameter_overrides(
        parser, "Workflow=my_agent.workflow:MyWorkflow Grader=my_agent.workflow:MyGrader"
    )
    parser.add_argument(
        "--env-vars",
        metavar="FILE",
        help="a JSON file of environment variables over the template's, as sam local's "
        '--env-vars takes it: {"Parameters": {...}} for every function, {"ApiFunction": {...}} '
        "for one (e.g. ROLLOUT_SDK_OSMOSIS03_POLLING_LEASE_SECONDS)",
    )
    parser.add_argument(
        "--max-instances",
        type=int,
        default=DEFAULT_MAX_INSTANCES,
        metavar="N",
        help=f"instances of each function at once (default {DEFAULT_MAX_INSTANCES}; Lambda's "
        "account limit starts at 1,000): past it a request is throttled, as at Lambda's limit",
    )
    parser.add_argument(
        "--redrive-every",
        type=float,
        metavar="SECONDS",
        help="run the re-drive function this often (default: its schedule, RedriveIntervalMinutes; "
        "0: never)",
    )
    parser.add_argument(
        "--allowed-server-hosts",
        metavar="HOSTS",
        help="the template parameter AllowedServerHosts (host or host:port, comma-separated): "
        "as on Lambda, the functions call only public addresses and these hosts, so a TrainGate "
        "on 127.0.0.1 must be named here",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    import uvicorn
    from botocore.exceptions import BotoCoreError, ClientError

    from rollout_sdk.errors import ConfigurationError
    from rollout_sdk.local import invoke as inv
    from rollout_sdk.local.start_api import LocalApi, local_stack

    stack: inv.EmulatedStack | None = None
    api: LocalApi | None = None
    try:
        template = inv.load(args.template)
        logical_id = inv.resolve_function(template, "ApiFunction")
        overrides = inv.parse_overrides(args.parameter_overrides, template)
        if args.allowed_server_hosts:
            overrides["AllowedServerHosts"] = args.allowed_server_hosts
        if args.agent:
            overrides["AgentLoop"] = args.agent
        agent = inv.template_agent(template, overrides.get("AgentLoop"))
        stack = inv.emulated_stack(
            args.template, endpoint=args.endpoint, agent=agent, server_key=args.server_key
        )
        api = local_stack(
            template,
            stack.resources,
            overrides,
            max_instances=args.max_instances,
            redrive_every=args.redrive_every,
            env_vars=inv.load_env_vars(args.env_vars) if args.env_vars else None,
        )
        api.start()
        print(
            f"rollout-sdk: serving {logical_id} of {args.template} on "
            f"http://127.0.0.1:{args.port} (AWS: {stack.endpoint}"
            f"{', embedded moto, stopped on exit' if stack.emulator else ''}; server key: "
            "the emulator's secret)",
            file=sys.stderr,
        )
        uvicorn.run(api, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")
    except ConfigurationError as exc:
        return fail(str(exc), 1)
    except (BotoCoreError, ClientError) as exc:
        return fail(f"the AWS emulator failed: {exc}", 1)
    except OSError as exc:
        return fail(f"cannot serve on 127.0.0.1:{args.port}: {exc}", 1)
    finally:
        if api is not None:
            api.close()
        if stack is not None:
            stack.stop()
    return 0
