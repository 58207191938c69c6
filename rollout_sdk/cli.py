"""The ``rollout-sdk`` command: serve, validate, demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .server import DEFAULT_STATE_DIR, SQLITE_FILE

DEFAULT_AGENT = "examples.calculator.agent:agent_loop"
DEFAULT_DATASET = "examples/calculator/dataset.jsonl"


def _fail(message: str, code: int = 2) -> int:
    print(f"rollout-sdk: error: {message}", file=sys.stderr)
    return code


def _cmd_validate(args: argparse.Namespace) -> int:
    from .errors import ConfigurationError
    from .loader import load_agent_loop
    from .validation import format_report, validate_agent_loop

    try:
        agent_loop = load_agent_loop(args.agent)
    except ConfigurationError as exc:
        return _fail(str(exc), 1)
    result = validate_agent_loop(agent_loop)
    print(format_report(result, verbose=args.verbose))
    return 0 if result.valid else 1


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .errors import ConfigurationError, StoreError
    from .loader import load_agent_loop
    from .server import build_local_app
    from .settings import get_settings
    from .validation import format_report, validate_agent_loop

    try:
        settings = get_settings()
        agent_loop = load_agent_loop(args.agent)
    except ConfigurationError as exc:
        return _fail(str(exc), 1)
    result = validate_agent_loop(agent_loop)
    if not result.valid:
        print(format_report(result), file=sys.stderr)
        return 1
    keys = [k for k in (args.api_key, os.environ.get("ROLLOUT_SDK_SERVER_KEY")) if k]
    try:
        app = build_local_app(
            agent_loop,
            store=args.store,
            state_dir=args.state_dir,
            api_keys=keys,
            settings=settings,
            debug_dir=args.debug_dir,
        )
    except (ConfigurationError, StoreError) as exc:
        return _fail(str(exc), 1)
    where = (
        f"SQLite at {Path(args.state_dir) / SQLITE_FILE}" if args.store == "sqlite" else "memory"
    )
    print(
        f"rollout-sdk: serving agent loop {agent_loop.name!r} on http://{args.host}:{args.port} "
        f"(store: {where}; server key: {'required' if keys else 'none'})",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


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
            "process, behind uvicorn. Settings come from the OSMOSIS_ROLLOUT_* environment "
            "variables (see the README)."
        ),
    )
    serve.add_argument(
        "--agent",
        required=True,
        metavar="MODULE:ATTR",
        help="the agent loop to serve, e.g. examples.calculator.agent:agent_loop",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 to accept other machines)",
    )
    serve.add_argument("--port", type=int, default=9000, help="port to bind (default 9000)")
    serve.add_argument(
        "--api-key",
        metavar="KEY",
        help="server key TrainGate must send as 'Authorization: Bearer KEY' "
        "(or set ROLLOUT_SDK_SERVER_KEY); default: no key",
    )
    serve.add_argument(
        "--store",
        choices=("sqlite", "memory"),
        default="sqlite",
        help="record store (default sqlite: durable, a restart forgets nothing; "
        "memory: forgets everything on exit)",
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

    demo = sub.add_parser(
        "demo",
        help="run the example agent end to end on this machine",
        description=(
            "Start the local server and a TrainGate stand-in with a scripted model on free "
            "loopback ports, run every row of the dataset as a rollout, print a progress bar and "
            "a summary, and stop both."
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
        help="give up waiting for callbacks after this long (default 120)",
    )
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rollout-sdk``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
