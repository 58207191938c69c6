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

A token is bound to its rollout: sealing takes the ``rollout_id``, and opening opens only for
the same one, so a token copied into another rollout's record or queued message opens nowhere
(StoreError). The binding is the encryption context (KMS) or the associated data (AES-GCM), both
naming the purpose and the rollout id: :func:`encryption_context`. A bound token starts with
:data:`BOUND` (``b1:``). Tokens sealed before binding (no prefix: ``:`` occurs in neither
base64 alphabet they were written in) still open, for any rollout, until
:data:`UNBOUND_TOKENS_OPEN_UNTIL`: :func:`unbound` says why then, and how to delete that path.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rollout_sdk.errors import StoreError

if TYPE_CHECKING:
    from mypy_boto3_kms import KMSClient

logger = logging.getLogger("rollout_sdk.vault")

#: Binds a sealed token to its purpose, so it cannot be replayed as something else: the
#: ``purpose`` of every encryption context (template.yaml's key policy insists on it).
CONTEXT = b"rollout-sdk callback key v1"
PURPOSE = CONTEXT.decode()

#: What a token bound to its rollout starts with. ``:`` is in neither base64 alphabet, so no
#: token sealed before binding (LocalVault's urlsafe base64, KmsVault's standard base64) starts
#: so, and a token with a ``:`` elsewhere is of a format this version does not know.
BOUND = "b1:"

#: When this version was released: the first day tokens may be bound.
RELEASED = datetime(2026, 12, 1, tzinfo=UTC)
#: From this day on an unbound token is never opened: see :func:`unbound`.
UNBOUND_CUTOFF = datetime(2027, 3, 1, tzinfo=UTC)
UNBOUND_TOKENS_OPEN_UNTIL = UNBOUND_CUTOFF.timestamp()


def encryption_context(rollout_id: str) -> dict[str, str]:
    """What a bound token is sealed under: its purpose and its rollout. KMS takes it as the
    encryption context; LocalVault as associated data (:func:`associated_data`)."""
    return {"purpose": PURPOSE, "rollout_id": rollout_id}


def associated_data(context: Mapping[str, str]) -> bytes:
    """AES-GCM's associated data for ``context``: the purpose as the unbound tokens had it
    (:data:`CONTEXT`), then each further pair by key, key and value each prefixed by its UTF-8
    length (4 bytes, big-endian). The purpose is one fixed string, and the lengths say where
    each key and value ends, so no two contexts give the same bytes, whatever a rollout id holds.
    """
    if context.get("purpose") != PURPOSE:
        raise ValueError("a callback key's context must name its purpose")
    out = bytearray(CONTEXT)
    for key in sorted(set(context) - {"purpose"}):
        for text in (key, context[key]):
            data = text.encode("utf-8", "surrogatepass")
            out += len(data).to_bytes(4, "big") + data
    return bytes(out)


def opening(token: str, rollout_id: str, *, now: float) -> tuple[str, dict[str, str]]:
    """What opening ``token`` for ``rollout_id`` decrypts (the token without its prefix), and
    under which context; StoreError when no such token may be opened."""
    if token.startswith(BOUND):
        return token[len(BOUND) :], encryption_context(rollout_id)
    if ":" in token:
        raise StoreError(
            f"a sealed callback key of a format this version does not know cannot be opened "
            f"for rollout {rollout_id!r}"
        )
    return unbound(token, rollout_id, now=now)


def unbound(token: str, rollout_id: str, *, now: float) -> tuple[str, dict[str, str]]:
    """LEGACY: a token sealed before tokens were bound to their rollout, opened under the
    purpose alone (so it opens for any rollout) until :data:`UNBOUND_TOKENS_OPEN_UNTIL`.

    Why that date: versions before 2026-12-01 (:data:`RELEASED`) sealed unbound tokens, and an
    upgrade finds some in flight. Nothing holds one longer than a record can live:
    ``slot_expiry``'s bound (rollout_sdk/engine/service.py), the longest hand-off wait (6 h,
    ``MAX_HANDOFF_WAIT_SECONDS``) + ``request_timeout_seconds`` (at most 7 days) + the re-drive's
    age limit (at most 30 days) + ``record_ttl_seconds`` (at most 30 days) + a lease (at most
    1 h): 67 days 7 hours. A parked response is within it, as is the idempotency slot (which
    lives exactly that long but holds no key); a queued message lives at most 6 h, a dead letter
    at most 14 days (template.yaml's ``MessageRetentionPeriod``); Lambda's asynchronous events
    carry the key in clear, not sealed. 2026-12-01 + 67 d 7 h is 2027-02-06 07:00 UTC, rounded up
    to 2027-03-01 (tests/unit/test_vault.py recomputes the bound from the settings' limits).

    The trade-off: the date is counted from the release, not from when an operator upgrades. A
    deployment upgraded from an older version after 2027-03-01 finds its in-flight unbound keys
    refused (those rollouts wait, as for any key that cannot be opened, until their records
    expire): drain it first (no parked responses, empty rollout and dead-letter queues). A
    record's creation
    time is not used to refuse unbound tokens sooner: records created by old code after the
    release, in a deployment that upgrades later, carry unbound keys legitimately, and a queued
    message carries no creation time at all; past the date every unbound token is refused.

    The first one opened logs a warning (once per process).

    Delete on or after 2027-03-01, in the first release after that date: this function,
    :data:`UNBOUND_CUTOFF`, :data:`UNBOUND_TOKENS_OPEN_UNTIL`, :data:`RELEASED`,
    ``_warn_unbound`` and its lock, the line in :func:`opening` that calls it (a token without
    :data:`BOUND` is then refused there, as one of an unknown format), and the tests of unbound
    tokens (tests/unit/test_vault.py, tests/aws/test_vault_binding.py). :func:`associated_data`
    keeps :data:`CONTEXT` as its first bytes: they are part of every bound token's associated
    data.
    """
    if now >= UNBOUND_TOKENS_OPEN_UNTIL:
        raise StoreError(
            f"a sealed callback key from before keys were bound to their rollout cannot be "
            f"opened for rollout {rollout_id!r}: such keys open until {UNBOUND_CUTOFF:%Y-%m-%d} only"
        )
    _warn_unbound(rollout_id)
    return token, {"purpose": PURPOSE}


#: LEGACY (:func:`unbound`): taken by the first unbound token opened, and never given back.
_unbound_warning = threading.Lock()


def _warn_unbound(rollout_id: str) -> None:
    """LEGACY (:func:`unbound`): the warning, once per process (whoever takes the lock)."""
    if _unbound_warning.acquire(blocking=False):
        logger.warning(
            "opened a callback key sealed before keys were bound to their rollout; such keys "
            f"open until {UNBOUND_CUTOFF:%Y-%m-%d} only (logged once)",
            extra={"rollout_id": rollout_id},
        )


@runtime_checkable
class KeyVault(Protocol):
    """Seals and opens callback keys."""

    async def seal(self, plaintext: str, *, rollout_id: str) -> str:
        """An opaque, printable token for ``plaintext``, bound to ``rollout_id``; StoreError
        when it cannot be sealed."""
        ...

    async def open(self, token: str, *, rollout_id: str) -> str:
        """The plaintext of ``token``, sealed for ``rollout_id``; StoreError when it cannot be
        opened (for that rollout, or at all)."""
        ...


class LocalVault:
    """AES-256-GCM under a key kept in ``key_file`` (created 0600 on first use) or in memory.

    Sealing and opening run inline on the loop: AES-GCM over a callback key is a few
    microseconds of CPU with no I/O (the key file is read once, at construction), less than a
    hop to a thread would cost. The associated data binds each token to its rollout
    (:func:`associated_data`); ``clock`` decides whether an unbound token may still open.
    """

    def __init__(
        self, key_file: str | Path | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        # Here: the Lambda functions seal with KMS and never load cryptography.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.key_file = Path(key_file) if key_file else None
        self._aead = AESGCM(self._load_key())
        self._clock = clock

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

    async def seal(self, plaintext: str, *, rollout_id: str) -> str:
        nonce = secrets.token_bytes(12)
        aad = associated_data(encryption_context(rollout_id))
        sealed = self._aead.encrypt(nonce, plaintext.encode(), aad)
        return BOUND + base64.urlsafe_b64encode(nonce + sealed).decode()

    async def open(self, token: str, *, rollout_id: str) -> str:
        # Here, as at construction: cryptography only where a local vault is built.
        from cryptography.exceptions import InvalidTag

        body, context = opening(token, rollout_id, now=self._clock())
        try:
            raw = base64.urlsafe_b64decode(body.encode())
            return self._aead.decrypt(raw[:12], raw[12:], associated_data(context)).decode()
        except (InvalidTag, ValueError) as exc:
            # A token sealed for another rollout and a damaged one fail alike (GCM's tag).
            where = self.key_file or "the in-memory key"
            raise StoreError(
                f"a sealed callback key cannot be opened for rollout {rollout_id!r} with {where}"
            ) from exc


class KmsVault:
    """AWS KMS under ``key_id``; the encryption context names the purpose and the rollout
    (:func:`encryption_context`), so KMS opens a token only for the rollout it was sealed for.

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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key_id = key_id
        self._clock = clock
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
        # the rollout that asked for it (rollout_sdk.cost.meter).
        context = contextvars.copy_context()
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, context.run, work)
        except RuntimeError as exc:  # submitted after close()
            raise StoreError(f"the KMS vault for {self.key_id} is closed") from exc
        return await future

    async def seal(self, plaintext: str, *, rollout_id: str) -> str:
        return await self._call(lambda: self._seal(plaintext, rollout_id))

    async def open(self, token: str, *, rollout_id: str) -> str:
        body, context = opening(token, rollout_id, now=self._clock())
        return await self._call(lambda: self._open(body, context, rollout_id))

    def close(self) -> None:
        """Shut the vault's threads down (once the calls in flight are done)."""
        self._executor.shutdown(wait=True)

    def _seal(self, plaintext: str, rollout_id: str) -> str:
        # Here: the local server never loads botocore.
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            blob = self._kms.encrypt(
                KeyId=self.key_id,
                Plaintext=plaintext.encode(),
                EncryptionContext=encryption_context(rollout_id),
            )["CiphertextBlob"]
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(
                f"KMS could not seal a callback key with {self.key_id}: {exc}"
            ) from exc
        return BOUND + base64.b64encode(blob).decode()

    def _open(self, body: str, context: dict[str, str], rollout_id: str) -> str:
        # Here: the local server never loads botocore.
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            plain = self._kms.decrypt(
                CiphertextBlob=base64.b64decode(body, validate=True), EncryptionContext=context
            )["Plaintext"]
        except (BotoCoreError, ClientError, ValueError) as exc:
            # KMS answers a token sealed for another rollout as it does a damaged one
            # (InvalidCiphertextException): which it was, it does not say.
            raise StoreError(
                f"KMS could not open the sealed callback key for rollout {rollout_id!r}: {exc}"
            ) from exc
        return plain.decode()
