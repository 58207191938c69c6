"""What the commands share: the error line, the keys of the settings, the template's
parameter overrides."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rollout_sdk.local import report

if TYPE_CHECKING:
    from pydantic import SecretStr

PROG = "rollout-sdk"


def secret(value: SecretStr | None) -> str:
    """A key from the settings, or "" when it is not set."""
    return "" if value is None else value.get_secret_value()


def fail(message: str, code: int = 2) -> int:
    """``rollout-sdk: error: MESSAGE`` on stderr; ``code``, the exit status."""
    return report.fail(PROG, message, code)


def add_parameter_overrides(parser: argparse.ArgumentParser, example: str) -> None:
    """``--parameter-overrides NAME=VALUE ...``, as ``sam deploy`` takes them."""
    parser.add_argument(
        "--parameter-overrides",
        metavar="NAME=VALUE",
        nargs="+",
        action="extend",
        default=[],
        help=f"template parameters as sam deploy --parameter-overrides takes them, e.g. {example}",
    )
