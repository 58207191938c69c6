"""A sealed callback key opens only for the rollout it was sealed for (issue 20, item 2), on
moto's KMS: KmsVault itself, a queued message whose sealed key is another rollout's, a parked
record holding another rollout's key, and the keys sealed before the binding (unbound), which
open until the cutoff and not after."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rollout_sdk.dispatch.sealed import SEALED_KEY_FIELD
from rollout_sdk.errors import StoreError
from rollout_sdk.local.emulator import LocalResources
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.store.dynamodb import DynamoDBStore
from rollout_sdk.store.record import RecordState
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.vault import BOUND, PURPOSE, UNBOUND_TOKENS_OPEN_UNTIL, KmsVault

from .conftest import CALLBACK_KEY, ROOT
from .test_callback_key import _message_for, _queued, _record, reports
from .test_queue_handoff import batch
from .test_redrive_index import park, seal

queue_mode = pytest.mark.parametrize("handler", ["queue"], indirect=True)
BEFORE = UNBOUND_TOKENS_OPEN_UNTIL - 1.0


def _kms(handler: Any) -> Any:
    return handler.runtime.clients.kms


def _vault(handler: Any, resources: LocalResources, now: float) -> KmsVault:
    return KmsVault(resources.kms_key_id, client=_kms(handler), clock=lambda: now)


def _unbound(handler: Any, resources: LocalResources) -> str:
    """The callback key as versions before the binding sealed it: the purpose alone."""
    blob = _kms(handler).encrypt(
        KeyId=resources.kms_key_id,
        Plaintext=CALLBACK_KEY.encode(),
        EncryptionContext={"purpose": PURPOSE},
    )["CiphertextBlob"]
    return base64.b64encode(blob).decode()


def _sealed(message: dict[str, Any]) -> str:
    sealed: str = json.loads(message["Body"])[SEALED_KEY_FIELD]
    return sealed


def _carrying(message: dict[str, Any], sealed: str) -> dict[str, Any]:
    """``message`` with ``sealed`` for its sealed callback key."""
    return {
        **message,
        "Body": json.dumps({**json.loads(message["Body"]), SEALED_KEY_FIELD: sealed}),
    }


def _decrypts(handler: Any) -> list[dict[str, Any]]:
    """Every KMS Decrypt the handler's client makes from now on (its parameters)."""
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(params)

    _kms(handler).meta.events.register("provide-client-params.kms.Decrypt", record)
    return calls


def test_moto_kms_refuses_a_decrypt_under_another_encryption_context(
    handler: Any, resources: LocalResources
) -> None:
    # What the binding rests on: KMS (and moto, which these tests run on) opens a ciphertext
    # only under the encryption context it was sealed with.
    kms = _kms(handler)
    context = {"purpose": PURPOSE, "rollout_id": "rollout-a"}
    blob = kms.encrypt(KeyId=resources.kms_key_id, Plaintext=b"secret", EncryptionContext=context)[
        "CiphertextBlob"
    ]
    assert kms.decrypt(CiphertextBlob=blob, EncryptionContext=context)["Plaintext"] == b"secret"
    for other in ({**context, "rollout_id": "rollout-b"}, {"purpose": PURPOSE}, {}):
        with pytest.raises(ClientError) as refused:
            kms.decrypt(CiphertextBlob=blob, EncryptionContext=other)
        assert refused.value.response["Error"]["Code"] == "InvalidCiphertextException"


def test_a_kms_token_opens_for_its_rollout_only(handler: Any, resources: LocalResources) -> None:
    vault = _vault(handler, resources, BEFORE)
    try:
        token = handler.runtime.run(vault.seal(CALLBACK_KEY, rollout_id="rollout-a"))
        assert token.startswith(BOUND)
        assert handler.runtime.run(vault.open(token, rollout_id="rollout-a")) == CALLBACK_KEY
        with pytest.raises(StoreError, match=r"for rollout 'rollout-b'.*InvalidCiphertext"):
            handler.runtime.run(vault.open(token, rollout_id="rollout-b"))
        # Nor as an unbound token, its prefix dropped.
        with pytest.raises(StoreError, match="InvalidCiphertext"):
            handler.runtime.run(vault.open(token.removeprefix(BOUND), rollout_id="rollout-a"))
    finally:
        vault.close()


def test_an_unbound_kms_token_opens_before_the_cutoff_and_is_refused_after_without_kms(
    handler: Any, resources: LocalResources
) -> None:
    old = _unbound(handler, resources)
    assert ":" not in old
    before = _vault(handler, resources, BEFORE)
    after = _vault(handler, resources, UNBOUND_TOKENS_OPEN_UNTIL)
    try:
        for rid in ("rollout-a", "rollout-b"):  # unbound: for any rollout, as before
            assert handler.runtime.run(before.open(old, rollout_id=rid)) == CALLBACK_KEY
        decrypts = _decrypts(handler)
        with pytest.raises(StoreError, match="open until 2027-03-01 only"):
            handler.runtime.run(after.open(old, rollout_id="rollout-a"))
        assert decrypts == []  # told apart by its format: KMS is not asked
    finally:
        before.close()
        after.close()


# ---------------------------------------------------------------------- the real paths


@queue_mode
def test_a_queued_message_carrying_another_rollouts_sealed_key_does_not_run(
    handler: Any, resources: LocalResources, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    messages = _queued(handler, resources, url, "k-a", "k-b")
    a, b = _message_for(messages, "k-a"), _message_for(messages, "k-b")
    swapped = [_carrying(a, _sealed(b)), _carrying(b, _sealed(a))]

    result = invoke(handler, "QueueWorkerFunction", batch(swapped), timeout_seconds=900)

    failed = {f["itemIdentifier"] for f in result.result["batchItemFailures"]}
    assert failed == {m["MessageId"] for m in messages}  # neither ran with the other's key
    assert reports(traingate) == {}
    assert {_record(handler, rid).state for rid in ("k-a", "k-b")} == {RecordState.ACCEPTED}
    # Their own messages, delivered again, run.
    again = invoke(handler, "QueueWorkerFunction", batch(messages), timeout_seconds=900)
    assert again.result == {"batchItemFailures": []}
    assert reports(traingate) == {"k-a": ["COMPLETED"], "k-b": ["COMPLETED"]}


def test_a_parked_record_holding_another_rollouts_sealed_key_is_not_redriven(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    store: DynamoDBStore,
) -> None:
    traingate, url = standin
    runtime = handler.runtime
    own = seal(runtime, "p-own")
    runtime.run(park(store, own, "p-own", url))
    runtime.run(park(store, own, "p-copied", url))  # p-own's sealed key, copied

    result = invoke(
        handler,
        "RedriveFunction",
        load_event(ROOT / "events" / "redrive.json"),
        timeout_seconds=600,
    )

    assert (result.result["delivered"], result.result["failed"]) == (1, 1)
    assert reports(traingate) == {"p-own": ["COMPLETED"]}
    copied = _record(handler, "p-copied")
    assert copied.state == RecordState.FINISHED and copied.next_attempt_at is not None


@queue_mode
def test_a_message_sealed_before_the_binding_still_runs_until_the_cutoff(
    handler: Any,
    resources: LocalResources,
    standin: tuple[TrainGateStandIn, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An API function of the previous version sent it during the upgrade.
    traingate, url = standin
    (late,) = _queued(handler, resources, url, "k-late")
    (early,) = _queued(handler, resources, url, "k-early")
    old = [_carrying(m, _unbound(handler, resources)) for m in (early, late)]
    vault = handler.runtime.vault
    monkeypatch.setattr(vault, "_clock", lambda: BEFORE)
    ran = invoke(handler, "QueueWorkerFunction", batch(old[:1]), timeout_seconds=900)
    assert ran.result == {"batchItemFailures": []}
    assert reports(traingate) == {"k-early": ["COMPLETED"]}

    monkeypatch.setattr(vault, "_clock", lambda: UNBOUND_TOKENS_OPEN_UNTIL)
    refused = invoke(handler, "QueueWorkerFunction", batch(old[1:]), timeout_seconds=900)
    assert refused.result == {"batchItemFailures": [{"itemIdentifier": late["MessageId"]}]}
    assert _record(handler, "k-late").state == RecordState.ACCEPTED
    assert reports(traingate) == {"k-early": ["COMPLETED"]}
