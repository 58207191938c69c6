"""What the commands share: the error line and the keys of the settings."""

from __future__ import annotations

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
