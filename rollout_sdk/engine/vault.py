"""Sealing the callback key: it is stored only encrypted, and only while it may still be needed.

The callback key (a request's ``api_key``) lets whoever holds it post results into a training run,
so it never goes into a record in clear. Two vaults:

- :class:`LocalVault`: AES-256-GCM with a key file in the local server's state folder (mode 0600),
  or an in-memory key for the in-memory store. Reading the SQLite file or a backup of it without
  that key file yields nothing usable.
- :class:`KmsVault`: AWS KMS ``Encrypt``/``Decrypt`` with the template's key, used only when a
  final response is parked for re-drive (one request on that rare path).
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Callable
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

    def seal(self, plaintext: str) -> str:
        """An opaque, printable token for ``plaintext``."""
        ...

    def open(self, token: str) -> str:
        """The plaintext of ``token``; StoreError when it cannot be opened."""
        ...


class LocalVault:
    """AES-256-GCM under a key kept in ``key_file`` (created 0600 on first use) or in memory."""

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

    def seal(self, plaintext: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), CONTEXT)
        return base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, token: str) -> str:
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(token.encode())
            return self._aead.decrypt(raw[:12], raw[12:], CONTEXT).decode()
        except (InvalidTag, ValueError) as exc:
            where = self.key_file or "the in-memory key"
            raise StoreError(f"a sealed callback key cannot be opened with {where}") from exc


class KmsVault:
    """AWS KMS under ``key_id``; the encryption context names the purpose."""

    def __init__(self, key_id: str, *, client: KMSClient | Callable[[], KMSClient]) -> None:
        self.key_id = key_id
        # A callable builds the client on first use: sealing is rare (a parked response).
        self._source = client
        self._client: KMSClient | None = None

    @property
    def _kms(self) -> KMSClient:
        if self._client is None:
            self._client = self._source() if callable(self._source) else self._source
        return self._client

    def seal(self, plaintext: str) -> str:
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

    def open(self, token: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            plain = self._kms.decrypt(
                CiphertextBlob=base64.b64decode(token),
                EncryptionContext={"purpose": CONTEXT.decode()},
            )["Plaintext"]
        except (BotoCoreError, ClientError, ValueError) as exc:
            raise StoreError(f"KMS could not open a sealed callback key: {exc}") from exc
        return plain.decode()
