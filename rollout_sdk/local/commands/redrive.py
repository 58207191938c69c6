"""``rollout-sdk redrive``: one re-drive pass over the local server's store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rollout_sdk.local.commands.common import fail
from rollout_sdk.local.server import DEFAULT_STATE_DIR, SQLITE_FILE

NAME = "redrive"
HELP = "send undelivered final responses again, once"
DESCRIPTION = (
    "One re-drive pass over the local server's store: every final response whose "
    "callbacks all failed and whose next attempt is due is sent again (with the callback "
    "key sealed in the state folder). Safe while the server runs: a response being sent "
    "by one is skipped by the other. On AWS the scheduled RedriveFunction does this; "
    "run it by hand with `aws lambda invoke --function-name <RedriveFunction> out.json`."
)


def add_arguments(redrive: argparse.ArgumentParser) -> None:
    """``redrive``'s options."""
    redrive.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        metavar="DIR",
        help=f"the server's state folder (default {DEFAULT_STATE_DIR}/)",
    )
    redrive.add_argument(
        "--limit", type=int, default=1000, help="responses to send at most (default 1000)"
    )


def run(args: argparse.Namespace) -> int:
    """Send what is due once; 1 when a response could not be sent."""
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
        return fail(
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
        return fail(str(exc), 1)
