"""Sealed callback keys are bound to their rollout (issue 20, item 2): LocalVault's tokens, the
legacy (unbound) tokens of earlier versions and their cutoff, and the engine's own paths.

KmsVault's binding is checked on moto's KMS: tests/aws/test_vault_binding.py."""

from __future__ import annotations

import base64
import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk import vault as vault_module
from rollout_sdk.engine.service import slot_expiry
from rollout_sdk.errors import StoreError
from rollout_sdk.local.emulator import load_template
from rollout_sdk.settings import KitSettings, RolloutServerSettings, load_settings
from rollout_sdk.store.record import MAX_HANDOFF_WAIT_SECONDS, RecordState
from rollout_sdk.traingate.client import COMPLETED_PATH
from rollout_sdk.vault import (
    BOUND,
    CONTEXT,
    PURPOSE,
    RELEASED,
    UNBOUND_TOKENS_OPEN_UNTIL,
    LocalVault,
    associated_data,
    encryption_context,
)

from .support import accepted_record
from .test_recovery import KEY, rig

ROOT = Path(__file__).resolve().parents[2]
BEFORE = UNBOUND_TOKENS_OPEN_UNTIL - 1.0


@pytest.fixture
def unbound_warning() -> Iterator[None]:
    """The once-per-process warning, not yet given (as in a fresh process), and after."""
    lock = vault_module._unbound_warning
    if lock.locked():
        lock.release()
    yield
    if lock.locked():
        lock.release()


def old_local_token(key_file: Path, plaintext: str) -> str:
    """A token as LocalVault sealed it before binding: urlsafe base64 of nonce and ciphertext,
    the associated data the purpose alone."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = secrets.token_bytes(12)
    sealed = AESGCM(key_file.read_bytes()).encrypt(nonce, plaintext.encode(), CONTEXT)
    return base64.urlsafe_b64encode(nonce + sealed).decode()


async def test_a_local_token_opens_for_its_rollout_only() -> None:
    vault = LocalVault()
    token = await vault.seal(KEY, rollout_id="rollout-a")
    assert token.startswith(BOUND) and KEY not in token
    assert await vault.open(token, rollout_id="rollout-a") == KEY
    for other in ("rollout-b", "rollout-a ", "rollout-", "ROLLOUT-A"):
        with pytest.raises(StoreError, match=f"cannot be opened for rollout {other!r}"):
            await vault.open(token, rollout_id=other)


async def test_a_bound_token_whose_prefix_is_dropped_does_not_open_as_an_unbound_one() -> None:
    vault = LocalVault(clock=lambda: BEFORE)
    token = await vault.seal(KEY, rollout_id="rollout-a")
    with pytest.raises(StoreError, match="cannot be opened for rollout 'rollout-a'"):
        await vault.open(token.removeprefix(BOUND), rollout_id="rollout-a")


async def test_a_token_of_an_unknown_format_is_refused_without_trying_it() -> None:
    vault = LocalVault()
    token = await vault.seal(KEY, rollout_id="r")
    with pytest.raises(StoreError, match="format this version does not know"):
        await vault.open("b2:" + token.removeprefix(BOUND), rollout_id="r")


def test_the_associated_data_names_the_purpose_and_the_rollout_unambiguously() -> None:
    # The unbound tokens' associated data is the purpose alone, as before; a bound one's starts
    # with it, then the rollout id, its length first.
    assert associated_data({"purpose": PURPOSE}) == CONTEXT
    bound = associated_data(encryption_context("r-1"))
    assert bound == CONTEXT + b"\0\0\0\x0arollout_id" + b"\0\0\0\x03r-1"
    ids = ["r", "r\0", "\0r", "r-1", "rollout_id", "é", "\0\0\0\x01r", "x" * 256]
    assert len({associated_data(encryption_context(rid)) for rid in ids}) == len(ids)
    with pytest.raises(ValueError, match="purpose"):
        associated_data({"purpose": "something else", "rollout_id": "r"})


async def test_an_unbound_local_token_opens_for_any_rollout_before_the_cutoff_and_never_after(
    tmp_path: Path, unbound_warning: None, caplog: pytest.LogCaptureFixture
) -> None:
    key_file = tmp_path / "vault.key"
    now = [BEFORE]
    vault = LocalVault(key_file, clock=lambda: now[0])
    old = old_local_token(key_file, KEY)
    assert ":" not in old
    caplog.set_level(logging.WARNING, logger="rollout_sdk.vault")
    assert await vault.open(old, rollout_id="rollout-a") == KEY
    assert await vault.open(old, rollout_id="rollout-b") == KEY  # unbound: as before
    warnings = [r for r in caplog.records if r.name == "rollout_sdk.vault"]
    assert len(warnings) == 1 and "before keys were bound" in warnings[0].getMessage()
    now[0] = UNBOUND_TOKENS_OPEN_UNTIL
    with pytest.raises(StoreError, match="open until 2027-03-01 only"):
        await vault.open(old, rollout_id="rollout-a")
    # A bound token is not touched by the cutoff.
    bound = await vault.seal(KEY, rollout_id="rollout-a")
    assert await vault.open(bound, rollout_id="rollout-a") == KEY


def _limit(model: Any, name: str) -> float:
    (bound,) = [m.le for m in model.model_fields[name].metadata if hasattr(m, "le")]
    return float(bound)


def test_the_cutoff_outlives_everything_that_can_hold_an_unbound_token() -> None:
    # A record the last old version sealed a key into on the release day lives at most as long
    # as its idempotency slot is kept, with every setting at its largest.
    settings = load_settings(
        server={
            "record_ttl_seconds": int(_limit(RolloutServerSettings, "record_ttl_seconds")),
            "request_timeout_seconds": _limit(RolloutServerSettings, "request_timeout_seconds"),
        },
        kit={
            "redrive_max_age_seconds": int(_limit(KitSettings, "redrive_max_age_seconds")),
            "lease_seconds": _limit(KitSettings, "lease_seconds"),
            "heartbeat_seconds": 15.0,
        },
    )
    released = RELEASED.timestamp()
    longest_record = slot_expiry(released, settings) - released
    assert longest_record == 6 * 3600 + 7 * 86400 + 30 * 86400 + 30 * 86400 + 3600
    # The queues: a message lives at most its retention (the dead letter, from its first send).
    queues = load_template(ROOT / "template.yaml")["Resources"]
    retention = max(
        int(queues[name]["Properties"]["MessageRetentionPeriod"])
        for name in ("RolloutQueue", "RolloutDeadLetterQueue")
    )
    assert retention + MAX_HANDOFF_WAIT_SECONDS < longest_record
    assert released + longest_record < UNBOUND_TOKENS_OPEN_UNTIL
    assert UNBOUND_TOKENS_OPEN_UNTIL - (released + longest_record) < 30 * 86400  # rounded up only


def test_the_key_policy_insists_on_the_purpose_the_vault_seals_under() -> None:
    resources = load_template(ROOT / "template.yaml")["Resources"]
    statements = resources["CallbackKeyKey"]["Properties"]["KeyPolicy"]["Statement"]
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert deny["Condition"] == {
        "StringNotEquals": {"kms:EncryptionContext:purpose": PURPOSE},
    }
    assert {"kms:Encrypt", "kms:Decrypt"} <= set(deny["Action"])


# ---------------------------------------------------------------------- the engine's paths


async def test_a_sealed_key_copied_into_another_record_does_not_open_there() -> None:
    """The restart sweep reports each rollout with its record's sealed key: a key moved from
    rollout a's record into b's opens for neither b's callback nor anyone else's."""
    engine, store, gate, _ = await rig(ids=("a",), owner="server-1")
    moved = await store.get("a", now=time.time())
    assert moved is not None and moved.sealed_key is not None
    now = time.time()
    intruder = accepted_record("b", now=now).evolve(sealed_key=moved.sealed_key)
    assert (await store.create(intruder, now=now)).created

    with pytest.raises(StoreError, match="cannot be opened for rollout 'b'"):
        await engine.settlement.open_key(intruder)
    report = await engine.recovery.sweep_after_restart()

    assert report.delivered == ["a"]
    assert "cannot be opened for rollout 'b'" in report.failed["b"]
    assert [b["rollout_id"] for b in gate.bodies(COMPLETED_PATH)] == ["a"]
    left = await store.get("b", now=time.time())
    assert left is not None and left.state == RecordState.ACCEPTED  # not reported with a's key
