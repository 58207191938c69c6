"""``rollout-sdk register``: a deployed server's URL, registered with the platform."""

from __future__ import annotations

import argparse
import sys

from rollout_sdk.local.commands.common import fail, secret

NAME = "register"
HELP = "register a deployed server's URL with the platform"
DESCRIPTION = (
    "Check GET {url}/platform/health with the server key, then register the URL with the "
    "platform (POST {platform}/api/cli/rollout-server/register), printing exactly what is "
    "sent with the keys masked. Exit 0 when registered healthy, 2 when registered but "
    "reported unhealthy, 1 on any error."
)


def add_arguments(register: argparse.ArgumentParser) -> None:
    """``register``'s options."""
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
        help="your Osmosis platform access token, the personal access token the Osmosis CLI's "
        "'osmosis auth login --token' takes (or OSMOSIS_PLATFORM_TOKEN, which keeps it out of "
        "the process list)",
    )
    register.add_argument(
        "--workspace", help="workspace id sent as X-Osmosis-Org (or OSMOSIS_WORKSPACE_ID)"
    )
    register.add_argument(
        "--platform-url",
        help="platform base URL (default OSMOSIS_PLATFORM_URL or https://platform.osmosis.ai)",
    )


def run(args: argparse.Namespace) -> int:
    """0 when registered healthy, 2 when registered but unhealthy, 1 on any error."""
    from rollout_sdk.errors import ConfigurationError, RegisterError
    from rollout_sdk.local.register import register
    from rollout_sdk.settings import get_settings

    try:
        cli = get_settings().cli
        result = register(
            url=args.url,
            server_key=args.api_key or secret(cli.server_key),
            platform_token=args.token or secret(cli.platform_token),
            platform_url=cli.platform_url if args.platform_url is None else args.platform_url,
            workspace=args.workspace or cli.workspace_id,
        )
    except (ConfigurationError, RegisterError) as exc:
        return fail(str(exc), 1)
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
