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
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        subparser = sub.add_parser(command.NAME, help=command.HELP, description=command.DESCRIPTION)
        command.add_arguments(subparser)
        subparser.set_defaults(func=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rollout-sdk``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
