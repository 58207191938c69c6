"""The API function's server keys, read from a Secrets Manager secret.

Read through Powertools Parameters, whose cache lives as long as the execution environment; the
first request that needs a key reads it, never the import. A cache miss is a network call, so the
read runs on a thread of the provider's own, never on the loop that serves the request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property, partial
from typing import TYPE_CHECKING

from rollout_sdk.errors import ConfigurationError

if TYPE_CHECKING:
    # Here: only the API function reads the secret, at its first protected request.
    from aws_lambda_powertools.utilities.parameters import SecretsProvider
    from mypy_boto3_secretsmanager import SecretsManagerClient

#: Reads a secret's value: (name, max age in seconds) -> the value.
SecretReader = Callable[[str, int], str]


def parse_server_keys(secret: str | None) -> list[str]:
    """Server keys from a secret value: one key, a JSON list of keys, or ``{"keys": [...]}``.

    Several keys may be valid at once, so a key can be rotated without downtime. An empty or
    blank secret is a ConfigurationError: the server must never run open by accident.
    """
    text = (secret or "").strip()
    if not text:
        raise ConfigurationError("the server-key secret is empty; put the server key in it")
    if text.startswith(("[", "{")):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"the server-key secret is not valid JSON: {exc.msg}") from exc
        keys = value.get("keys") if isinstance(value, dict) else value
        if (
            not isinstance(keys, list)
            or not keys
            or not all(isinstance(k, str) and k.strip() for k in keys)
        ):
            raise ConfigurationError(
                "the server-key secret must be a key, a non-empty JSON list of keys, or "
                '{"keys": [...]}, with no blank key'
            )
        return [k.strip() for k in keys]
    return [text]


@dataclass(eq=False, repr=False)
class SecretServerKeys:
    """The valid server keys (the app's asynchronous key provider), from the secret ``name``.

    The value is cached for ``max_age_seconds`` (0 reads it on every call). ``reader`` replaces
    Powertools' secrets provider over ``client``; it runs on the provider's one thread, which
    :meth:`close` shuts down. Raises ConfigurationError for a value that holds no key; the
    provider's own errors pass through (the app answers 503 for them).
    """

    name: str
    _: KW_ONLY
    max_age_seconds: int
    client: Callable[[], SecretsManagerClient] | None = None
    reader: SecretReader | None = None
    # One thread: reads are rare (one per cache miss) and run one at a time, so requests that
    # miss together wait for one read and then find the value cached, and Powertools' cache
    # is only ever touched from this thread.
    _executor: ThreadPoolExecutor = field(
        init=False,
        default_factory=partial(
            ThreadPoolExecutor, max_workers=1, thread_name_prefix="rollout-sdk-secret"
        ),
    )

    async def __call__(self) -> list[str]:
        reader = self.reader or self._read
        loop = asyncio.get_running_loop()
        value = await loop.run_in_executor(self._executor, reader, self.name, self.max_age_seconds)
        return parse_server_keys(value)

    def close(self) -> None:
        """Shut the provider's thread down (once a read in flight is done)."""
        self._executor.shutdown(wait=True)

    @cached_property
    def _provider(self) -> SecretsProvider:
        # Here: only the API function reads the secret, at its first protected request.
        from aws_lambda_powertools.utilities.parameters import SecretsProvider

        return SecretsProvider(boto3_client=self.client() if self.client else None)

    def _read(self, name: str, max_age: int) -> str:
        value = self._provider.get(name, max_age=max_age)
        if isinstance(value, bytes):
            return value.decode()
        if not isinstance(value, str):
            raise ConfigurationError(f"secret {name} is not a string")
        return value
