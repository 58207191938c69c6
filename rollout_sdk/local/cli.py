"""The ``rollout-sdk`` command: serve, validate, invoke, register, redrive, demo, test.

Each subcommand is a module of :mod:`rollout_sdk.local.commands` and imports what it runs inside
its own function: ``rollout-sdk --help``, ``validate`` and every other command load only their
own libraries (uvicorn, moto, boto3, httpx), so the CLI starts fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rollout_sdk.local.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render ``--help`` in the docs)."""
    parser = argparse.ArgumentParser(
        prog="rollout-sdk",
        description="Run remote-rollout agent loops for RL training: locally, or on AWS Lambda.",
        epilog="Each command takes --help. In a copy of the kit's repository: docs/local.md (the "
        "local commands, and Troubleshooting for what an error means), docs/aws.md (deploying).",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on a failure, print the traceback of its cause too (before the one-line message)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        subparser = sub.add_parser(command.NAME, help=command.HELP, description=command.DESCRIPTION)
        command.add_arguments(subparser)
        subparser.set_defaults(func=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rollout-sdk``."""
    from rollout_sdk.local import report

    parser = build_parser()
    args = parser.parse_args(argv)
    report.DEBUG = bool(args.debug)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # what no command expected: one line, the traceback on --debug
        if report.DEBUG:
            raise
        where = f" ({exc.__class__.__module__}.{exc.__class__.__qualname__})"
        return report.fail(
            "rollout-sdk",
            f"{exc or exc.__class__.__name__}{where}; run with --debug for the traceback",
            1,
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
