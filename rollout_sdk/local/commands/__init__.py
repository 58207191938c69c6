"""The subcommands of ``rollout-sdk``, one module each: its parser setup (``add_parser``) and
its command function (``run``). Each imports what it runs inside ``run``, so ``--help`` and a
bad option load none of it."""

from __future__ import annotations

from rollout_sdk.local.commands import demo, invoke, redrive, register, serve, test, validate

#: In the order ``rollout-sdk --help`` lists them.
COMMANDS = (serve, validate, invoke, register, redrive, demo, test)
