"""``rollout-sdk invoke``: a Lambda handler on an event file, without a container engine."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from rollout_sdk.local.commands.common import add_parameter_overrides, fail
from rollout_sdk.project import project_path
from rollout_sdk.stack import LambdaFunction

NAME = "invoke"
HELP = "run a Lambda handler on an event file, without a container engine"
DESCRIPTION = (
    "Run a function of template.yaml on an event file the way `sam local invoke` does: "
    "the function's environment is resolved from the template and set in this "
    "process's environment (over variables of the same name), handler.py is imported "
    "in this process, and AWS is an embedded moto server on 127.0.0.1 (started and "
    "stopped by this command) unless --endpoint is given. Prints the handler's result as JSON, "
    "alone on stdout (with --follow, the worker's after it); logs and metrics go to stderr."
)


def add_arguments(invoke: argparse.ArgumentParser) -> None:
    """``invoke``'s options."""
    invoke.add_argument(
        "function",
        metavar="FUNCTION",
        help="a function of template.yaml by its logical id or alias: "
        + ", ".join(f"{f.names.logical_id} ({f.names.dimension})" for f in LambdaFunction),
    )
    invoke.add_argument(
        "event",
        metavar="EVENT_FILE",
        type=project_path,
        help="JSON event, e.g. events/init.json (from here or the project's root)",
    )
    invoke.add_argument(
        "--template",
        default="template.yaml",
        type=project_path,
        help="SAM template (default template.yaml, from here or the project's root)",
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
    add_parameter_overrides(
        invoke,
        "Workflow=my_agent.workflow:MyWorkflow (the re-drive then checks 0.3.8's leases too)",
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


def run(args: argparse.Namespace) -> int:
    """Run the function on the event; print its result."""
    from botocore.exceptions import BotoCoreError, ClientError

    from rollout_sdk.errors import ConfigurationError
    from rollout_sdk.local import invoke as inv
    from rollout_sdk.local.register import mask

    try:
        template = inv.load(args.template)
        logical_id = inv.resolve_function(template, args.function)
        event = inv.load_event(args.event)
        inv.parse_overrides(args.parameter_overrides, template)  # a bad one is said before any work
    except ConfigurationError as exc:
        return fail(str(exc), 1)
    agent = inv.template_agent(template, args.agent)
    # The result alone on stdout (a pipe takes it); the functions' log lines and metrics, and
    # the emulator's, go to stderr.
    results = inv.results_channel()
    stack: inv.EmulatedStack | None = None
    standin_server = None
    endpoint = args.endpoint or "the embedded moto server"
    try:
        stack = inv.emulated_stack(
            args.template, endpoint=args.endpoint, agent=agent, server_key=args.server_key
        )
        endpoint, resources = stack.endpoint, stack.resources
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
        overrides = inv.parse_overrides(args.parameter_overrides, template)
        if hosts:
            overrides["AllowedServerHosts"] = ",".join(hosts)
        env = inv.function_environment(template, logical_id, resources, overrides)
        handler = inv.import_handler(env)
        timeout = inv.function_timeout(template, logical_id)
        call = inv.invoke(handler, logical_id, event, timeout_seconds=timeout)
        print(json.dumps(call.result, indent=2, default=str), file=results, flush=True)
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
                print(json.dumps(followed.result, indent=2, default=str), file=results, flush=True)
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
        return fail(str(exc), 1)
    except (BotoCoreError, ClientError) as exc:
        return fail(f"the AWS emulator at {endpoint} failed: {exc}", 1)
    finally:
        if standin_server is not None:
            standin_server[1].stop()
        if stack is not None:
            stack.stop()
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
