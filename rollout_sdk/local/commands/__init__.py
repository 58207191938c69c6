"""The subcommands of ``rollout-sdk``, one module each. A module declares its command: its
``NAME``, the ``HELP`` line ``rollout-sdk --help`` shows for it, the ``DESCRIPTION`` its own
``--help`` opens with, ``add_arguments`` (its options) and ``run`` (the command function);
:func:`rollout_sdk.local.cli.build_parser` makes each subparser from that. Each imports what it
runs inside ``run``, so ``--help`` and a bad option load none of it."""

from __future__ import annotations

import argparse
from typing import Protocol

from rollout_sdk.local.commands import (
    demo,
    invoke,
    redrive,
    register,
    serve,
    start_api,
    test,
    validate,
)


class Command(Protocol):
    """What a command module declares."""

    NAME: str
    HELP: str
    DESCRIPTION: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


#: In the order ``rollout-sdk --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    serve,
    validate,
    invoke,
    start_api,
    register,
    redrive,
    demo,
    test,
)
