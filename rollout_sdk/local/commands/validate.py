"""``rollout-sdk validate``: check an agent loop."""

from __future__ import annotations

import argparse

from rollout_sdk.local.commands.common import fail

NAME = "validate"
HELP = "check an agent loop"
DESCRIPTION = (
    "Check an agent loop's name, tools and run method. Exit 0 when valid, 1 with "
    "each error's code and message otherwise."
)


def add_arguments(validate: argparse.ArgumentParser) -> None:
    """``validate``'s options."""
    validate.add_argument("agent", metavar="MODULE:ATTR", help="the agent loop to check")
    validate.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also say 'no warnings' when the agent loop is valid without any (the verdict "
        "line is printed either way)",
    )


def run(args: argparse.Namespace) -> int:
    """0 when the agent loop is valid, 1 with its errors."""
    from rollout_sdk.agent.validation import format_report, validate_agent_loop
    from rollout_sdk.errors import ConfigurationError, MCPLoadError
    from rollout_sdk.loader import load_agent_loop

    try:
        agent_loop = load_agent_loop(args.agent)
    except (ConfigurationError, MCPLoadError) as exc:
        return fail(str(exc), 1)
    result = validate_agent_loop(agent_loop)
    print(format_report(result, verbose=args.verbose))
    return 0 if result.valid else 1
