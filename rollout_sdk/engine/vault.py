"""Sealing the callback key: it is stored only encrypted, and only while it may still be needed.

The callback key (a request's ``api_key``) lets whoever holds it post results into a training run,
so it never goes into a record in clear. Two vaults:

- :class:`LocalVault`: AES-256-GCM with a key file in the local server's state folder (mode 0600),
  or an in-memory key for the in-memory store. Reading the SQLite file or a backup of it without
  that key file yields nothing usable.
- :class:`KmsVault`: AWS KMS ``Encrypt``/``Decrypt`` with the template's key: when a final
  response is parked for re-drive (a rare path), and with ``HandOff=queue`` for every queued
  rollout (sealed at init, opened by the queue worker: two requests per rollout; docs/aws.md
  says where the key lives at each step).

The port is asynchronous because a KMS call is a network round trip: :class:`KmsVault` makes it
on a small thread pool of its own, so the loop running a whole batch of rollouts never waits on
it. :class:`LocalVault` seals in place (see there why).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rollout_sdk.errors import StoreError

if TYPE_CHECKING:
    from mypy_boto3_kms import KMSClient

#: Binds a sealed token to its purpose, so it cannot be replayed as something else.
CONTEXT = b"rollout-sdk callback key v1"


@runtime_checkable
class KeyVault(Protocol):
    """Seals and opens callback keys."""

    async def seal(self, plaintext: str) -> str:
        """An opaque, printable token for ``plaintext``; StoreError when it cannot be sealed."""
        ...

    async def open(self, token: str) -> str:
        """The plaintext of ``token``; StoreError when it cannot be opened."""
        ...


class LocalVault:
    """AES-256-GCM under a key kept in ``key_file`` (created 0600 on first use) or in memory.

    Sealing and opening run inline on the loop: AES-GCM over a callback key is a few
    microseconds of CPU with no I/O (the key file is read once, at construction), less than a
    hop to a thread would cost.
    """

    def __init__(self, key_file: str | Path | None = None) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.key_file = Path(key_file) if key_file else None
        self._aead = AESGCM(self._load_key())

    def _load_key(self) -> bytes:
        if self.key_file is None:
            return secrets.token_bytes(32)
        try:
            return self.key_file.read_bytes()
        except FileNotFoundError:
            pass
        key = secrets.token_bytes(32)
        self.key_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return self.key_file.read_bytes()
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key)
        return key

    async def seal(self, plaintext: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), CONTEXT)
        return base64.urlsafe_b64encode(nonce + sealed).decode()

    async def open(self, token: str) -> str:
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(token.encode())
            return self._aead.decrypt(raw[:12], raw[12:], CONTEXT).decode()
        except (InvalidTag, ValueError) as exc:
            where = self.key_file or "the in-memory key"
            raise StoreError(f"a sealed callback key cannot be opened with {where}") from exc


class KmsVault:
    """AWS KMS under ``key_id``; the encryption context names the purpose.

    boto3 is synchronous, so each call runs on the vault's own threads (``max_workers``, a few:
    a queue batch opens its keys at once, and a batch may park several; each call is one short
    round trip); :meth:`close` shuts them down.
    """

    def __init__(
        self,
        key_id: str,
        *,
        client: KMSClient | Callable[[], KMSClient],
        max_workers: int = 4,
    ) -> None:
        self.key_id = key_id
        # A callable builds the client on first use: most environments never seal (direct mode
        # parks few responses), so most cold starts pay nothing for it.
        self._source = client
        self._client: KMSClient | None = None
        self._client_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="rollout-sdk-kms"
        )

    @property
    def _kms(self) -> KMSClient:
        # Built on the vault's threads, and only once however many calls race for it.
        with self._client_lock:
            if self._client is None:
                self._client = self._source() if callable(self._source) else self._source
            return self._client

    async def _call(self, work: Callable[[], str]) -> str:
        # In the caller's context, as asyncio.to_thread runs a call: the request is charged to
        # the rollout that asked for it (rollout_sdk.engine.cost).
        context = contextvars.copy_context()
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, context.run, work)
        except RuntimeError as exc:  # submitted after close()
            raise StoreError(f"the KMS vault for {self.key_id} is closed") from exc
        return await future

    async def seal(self, plaintext: str) -> str:
        return await self._call(lambda: self._seal(plaintext))

    async def open(self, token: str) -> str:
        return await self._call(lambda: self._open(token))

    def close(self) -> None:
        """Shut the vault's threads down (once the calls in flight are done)."""
        self._executor.shutdown(wait=True)

    def _seal(self, plaintext: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            blob = self._kms.encrypt(
                KeyId=self.key_id,
                Plaintext=plaintext.encode(),
                EncryptionContext={"purpose": CONTEXT.decode()},
            )["CiphertextBlob"]
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(
                f"KMS could not seal a callback key with {self.key_id}: {exc}"
            ) from exc
        return base64.b64encode(blob).decode()

    def _open(self, token: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            plain = self._kms.decrypt(
                CiphertextBlob=base64.b64decode(token),
                EncryptionContext={"purpose": CONTEXT.decode()},
            )["Plaintext"]
        except (BotoCoreError, ClientError, ValueError) as exc:
            raise StoreError(f"KMS could not open a sealed callback key: {exc}") from exc
        return plain.decode()
