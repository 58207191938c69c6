"""``rollout-sdk validate``: check an agent loop."""

from __future__ import annotations

import argparse
from typing import Any

from rollout_sdk.local.commands.common import fail


def add_parser(sub: Any) -> None:
    """``validate``'s options."""
    validate = sub.add_parser(
        "validate",
        help="check an agent loop",
        description="Check an agent loop's name, tools and run method. Exit 0 when valid, 1 with "
        "each error's code and message otherwise.",
    )
    validate.add_argument("agent", metavar="MODULE:ATTR", help="the agent loop to check")
    validate.add_argument("-v", "--verbose", action="store_true", help="say so when all is well")
    validate.set_defaults(func=run)


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
